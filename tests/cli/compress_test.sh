#!/usr/bin/env bash
# Purpose: structured pruning and int8 quantization end to end, for every model of the catalog
# (all of them have prunable channel groups): 30 % of each group's channels pruned before epoch 2,
# a run killed after the pruning step resumes from a pruned checkpoint and ends with the same
# epochs and bitwise the same weights as the uninterrupted run, the checkpoint exports to
# safetensors at the pruned widths, the int8 weights are written with int8 tensors; two ranks
# (exprun launch) prune the same channels and train on; bad prune and int8 methods exit 2 naming the key.
# Usage: compress_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

spec() {  # spec MODEL FILE
  cat >"$2" <<YAML
name: c
seed: 1
model: {type: $1}
data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 32, test_size: 16, pool_size: 32}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 3, batch_size: 8, threads: 1, workers: 0, log_every: 0, eval_batch_size: 16}
methods:
  - {type: prune, pruner: {type: l1_filter}, ratio: 0.3, at_epoch: 2, benchmark: false}
  - {type: int8, calibration_batches: 2, benchmark: false}
output: {save_weights: true, tensorboard: false, checkpoint: {every_steps: 6, keep: 1}}
distributed: {timeout_s: 30}
YAML
}

for model in small_cnn mobilenet_v2 resnet18 resnet34 resnet50 resnet101 resnet152; do
  d="$TMP/$model"
  mkdir -p "$d"
  spec "$model" "$d/s.yaml"
  "$EXPRUN" run "$d/s.yaml" --out "$d/ref" >/dev/null 2>"$d/ref.err"
  check "[[ $? == 0 ]]" "$model: pruned run: $(tail -3 "$d/ref.err")"
  check "[[ \$(json $d/ref/c.json 'len(j[\"methods\"][\"prune\"][\"steps\"])') == 1 ]]" "$model: one pruning step recorded"
  check "[[ \$(json $d/ref/c.json '[m[\"model\"] for m in j[\"compression\"]]') == \"['fp32', 'pruned fp32', 'pruned int8']\" ]]" \
    "$model: the comparison has the full, pruned and int8 models"
  check "[[ \$(json $d/ref/c.json 'j[\"compression\"][1][\"params\"] < 0.75 * j[\"compression\"][0][\"params\"]') == True ]]" \
    "$model: the pruned model has fewer parameters"
  # Killed after the pruning step (steps 5-8 are epoch 2's): the latest checkpoint (step 6) is pruned.
  EXPRUN_FAULT=step@7 "$EXPRUN" run "$d/s.yaml" --out "$d/k" >/dev/null 2>"$d/k.err"
  check "[[ $? == 137 ]]" "$model: killed at step 7"
  "$EXPRUN" run "$d/s.yaml" --out "$d/k" --resume >/dev/null 2>"$d/kr.err"
  check "[[ $? == 0 ]]" "$model: resumed from the pruned checkpoint: $(tail -3 "$d/kr.err")"
  expect_grep "$d/kr.err" "resumed from .*step-000000006" "$model: resumed at step 6"
  same=$("$PY" - "$d/ref/c.json" "$d/k/c.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["train_loss", "val_loss", "val_top1", "steps", "samples"]
print(all(x.get(k) == y.get(k) for x, y in zip(a["epochs"], b["epochs"]) for k in keys) and len(a["epochs"]) == len(b["epochs"])
      and a["methods"] == b["methods"])
PYEOF
)
  check "[[ $same == True ]] && cmp -s $d/ref/c.weights.pt $d/k/c.weights.pt" "$model: resumed run equals the uninterrupted one"
  "$EXPRUN" export "$d/k/c.ckpt" -o "$d/c.safetensors" >/dev/null 2>"$d/x.err"
  check "[[ $? == 0 ]]" "$model: export: $(tail -2 "$d/x.err")"
  shapes=$("$PY" - "$d/c.safetensors" "$d/k/c.int8.safetensors" "$d/ref/c.json" <<'PYEOF'
import json, sys
from safetensors import safe_open
widths = json.load(open(sys.argv[3]))["methods"]["prune"]["steps"][0]["widths"]
with safe_open(sys.argv[1], "pt") as f:
    meta = f.metadata()
    ok = json.loads(meta["exprun_widths"]) == widths
    ok = ok and all(f.get_tensor(g + ".weight").shape[0] == w for g, w in widths.items())
with safe_open(sys.argv[2], "pt") as f:
    ok = ok and any(k.endswith(".weight") and str(f.get_tensor(k).dtype) == "torch.int8" for k in f.keys())
    ok = ok and all(f.get_tensor(g + ".weight").shape[0] == w for g, w in widths.items())
print(ok)
PYEOF
)
  check "[[ $shapes == True ]]" "$model: exported float and int8 weights have the pruned widths"
  rm -rf "$d"
done

# Quantization-aware fine-tuning (the last epoch, after pruning): a run killed inside it resumes
# from a checkpoint holding its activation grids, one killed before it calibrates them again, and
# both end as the uninterrupted run does; the int8 model is built on the grids it trained with.
for model in small_cnn mobilenet_v2; do
  d="$TMP/qat-$model"
  mkdir -p "$d"
  spec "$model" "$d/s.yaml"
  qat=(--set 'methods[1].qat_epochs=1' --set output.checkpoint.every_steps=5)
  "$EXPRUN" run "$d/s.yaml" --out "$d/ref" "${qat[@]}" >/dev/null 2>"$d/ref.err"
  check "[[ $? == 0 ]]" "$model QAT: $(tail -3 "$d/ref.err")"
  expect_grep "$d/ref.err" "quantization-aware fine-tuning from epoch 3" "$model: QAT starts before the last epoch"
  check "[[ \$(json $d/ref/c.json '[m[\"model\"] for m in j[\"compression\"]][2]') == 'pruned int8 (QAT)' ]]" "$model: the int8 row is QAT's"
  for kill in 11 7; do  # checkpoints at steps 5 (before QAT) and 10 (inside it)
    EXPRUN_FAULT=step@$kill "$EXPRUN" run "$d/s.yaml" --out "$d/k$kill" "${qat[@]}" >/dev/null 2>&1
    check "[[ $? == 137 ]]" "$model QAT: killed at step $kill"
    meta="$d/k$kill/c.ckpt/$(printf 'step-%09d' $((kill - 1 - (kill - 1) % 5)))/meta.json"  # JSON, then a checksum footer
    grids=$("$PY" -c 'import json, sys; print(len(json.loads(open(sys.argv[1], "rb").read().split(b"EXPRCKP1")[0]).get("methods", {}).get("int8", {}).get("qat_grids", [])))' "$meta")
    check "[[ ($kill == 11 && $grids -gt 0) || ($kill == 7 && $grids == 0) ]]" "$model: grids in the checkpoint only after QAT began ($grids)"
    "$EXPRUN" run "$d/s.yaml" --out "$d/k$kill" "${qat[@]}" --resume >/dev/null 2>"$d/kr.err"
    check "[[ $? == 0 ]]" "$model QAT: resumed after a kill at step $kill: $(tail -3 "$d/kr.err")"
    same=$("$PY" - "$d/ref/c.json" "$d/k$kill/c.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["train_loss", "val_loss", "val_top1", "steps", "samples"]
rows = lambda r: [(m["model"], m["top1"], m["bytes"]) for m in r["compression"]]
print(all(x.get(k) == y.get(k) for x, y in zip(a["epochs"], b["epochs"]) for k in keys) and len(a["epochs"]) == len(b["epochs"])
      and rows(a) == rows(b))
PYEOF
)
    check "[[ $same == True ]] && cmp -s $d/ref/c.weights.pt $d/k$kill/c.weights.pt" "$model QAT: killed at step $kill, resumed, equal"
  done
  rm -rf "$d"
done

# Two ranks prune the same channels (rank 0's choice) and train on: without batch norm (whose
# statistics are per rank), 2 ranks x 4 images train as 1 process x 8 does, before and after the
# pruning step (the gradient reducer is rebuilt for the new shapes) and through quantization-aware
# fine-tuning (the same grids on both ranks).
spec small_cnn "$TMP/two.yaml"
"$EXPRUN" launch --nproc-per-node 2 "$TMP/two.yaml" --out "$TMP/two" --set model.batch_norm=false --set model.dropout=0 --set train.batch_size=4 \
  --set 'methods[1].qat_epochs=1' >/dev/null 2>"$TMP/two.err"
check "[[ $? == 0 ]]" "2 ranks: $(tail -3 "$TMP/two.err")"
check "[[ \$(json $TMP/two/c.json 'j[\"status\"], len(j[\"methods\"][\"prune\"][\"steps\"])') == 'completed 1' ]]" "2 ranks: completed with one pruning step"
"$EXPRUN" run "$TMP/two.yaml" --out "$TMP/one" --set model.batch_norm=false --set model.dropout=0 --set 'methods[1].qat_epochs=1' >/dev/null 2>"$TMP/one.err"
check "[[ $? == 0 ]]" "1 process: $(tail -3 "$TMP/one.err")"
same=$("$PY" - "$TMP/one/c.json" "$TMP/two/c.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
steps = lambda r: r["methods"]["prune"]["steps"]
print(steps(a)[0]["widths"] == steps(b)[0]["widths"] and
      all(abs(x["train_loss"] - y["train_loss"]) <= 1e-4 * abs(x["train_loss"]) for x, y in zip(a["epochs"][:2], b["epochs"][:2])) and
      # the quantization-aware epoch: weights a float rounding apart (2 x 4 against 1 x 8 images)
      # can land on the other side of a fake-quantization step (2.3e-4 relative on an AVX2-only Zen 4)
      abs(a["epochs"][2]["train_loss"] - b["epochs"][2]["train_loss"]) <= 1e-3 * abs(a["epochs"][2]["train_loss"]))
PYEOF
)
check "[[ $same == True ]]" "2 ranks x 4 equal 1 process x 8 through the pruning step"

# Bad input: exit 2 and the key path.
spec small_cnn "$TMP/bad.yaml"
expect_code 2 "a ratio of 1" -- "$EXPRUN" validate "$TMP/bad.yaml" --set 'methods[0].ratio=1.0'
expect_grep "$TMP/err" "methods\[0\].ratio" "the ratio's key path"
expect_code 2 "int8 on CUDA" -- "$EXPRUN" validate "$TMP/bad.yaml" --set train.device=cuda
expect_grep "$TMP/err" "methods\[1\]: int8 runs on LibTorch's CPU kernels" "int8 on CUDA names the int8 method"
expect_code 2 "an unknown pruner" -- "$EXPRUN" validate "$TMP/bad.yaml" --set 'methods[0].pruner.type=magnitude'
expect_grep "$TMP/err" "methods\[0\].pruner.type" "an unknown pruner names methods[0].pruner.type"
expect_code 2 "QAT leaving no float epochs" -- "$EXPRUN" validate "$TMP/bad.yaml" --set 'methods[1].qat_epochs=3'
expect_grep "$TMP/err" "methods\[1\].qat_epochs" "QAT's epochs named"
expect_code 2 "an unknown method" -- "$EXPRUN" validate "$TMP/bad.yaml" --set 'methods[2]={type: mixupp}'
expect_grep "$TMP/err" "methods\[2\].type" "an unknown method names methods[2].type"
finish compress
