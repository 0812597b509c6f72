#!/usr/bin/env bash
# Purpose: "a refactor changes no result" — runs a fixed set of small, fixed-seed Fashion-MNIST
# configurations (1 process; 2 ranks with each comm strategy; bf16 + accumulation; fp16 with loss
# scaling, EMA, clipping, label smoothing, channels_last and activation checkpointing) and prints
# every epoch's losses, accuracies, learning rate and gradient norm with all their digits, every
# step's loss, lr, gradient norm and loss scale from the per-step CSV, the summary's accuracies and
# the provenance's derived figures (batching, steps, FLOPs; no times or host names). Run it
# before and after a change and compare the two outputs byte for byte:
#   bench/same_results.sh > before.txt ; (change, rebuild) ; bench/same_results.sh > after.txt
#   cmp before.txt after.txt
# Usage: bench/same_results.sh [EXPRUN_BINARY]   (default: build/exprun)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
EXE="${1:-$ROOT/build/exprun}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
E="$ROOT/experiments/fashion-mnist"
SMALL=(--set data.train_limit=6000 --set data.test_limit=2000 --set train.epochs=2 --set train.log_every=0)
run() {  # name, then exprun arguments
  local name="$1"
  shift
  "$EXE" "$@" "${SMALL[@]}" --set "name=$name" --out "$OUT" --overwrite > "$OUT/$name.log" 2>&1 ||
    { echo "run $name failed:" >&2; tail -20 "$OUT/$name.log" >&2; exit 1; }
}
run one-process run "$E/compare-1proc.yaml"
run ddp-allreduce launch --nproc-per-node 2 "$E/compare-2proc-ddp.yaml"
run ddp-bf16-accumulate launch --nproc-per-node 2 "$E/compare-2proc-opt.yaml"
for comm in allreduce_after_backward bf16_compress fp16_compress; do
  run "ddp-$comm" launch --nproc-per-node 2 "$E/compare-2proc-ddp.yaml" --set distributed.comm.type=$comm
done
run ddp-powersgd launch --nproc-per-node 2 "$E/compare-2proc-ddp.yaml" --set distributed.comm.type=powersgd \
  --set distributed.comm.start_iter=4
run fp16-options run "$E/compare-1proc.yaml" --set train.precision=fp16 --set train.ema_decay=0.99 \
  --set train.clip_grad_norm=1.0 --set train.label_smoothing=0.1 --set train.channels_last=true \
  --set "train.activation_checkpointing=[features]" --set train.accumulate=2
run evals-target run "$E/compare-1proc.yaml" --set train.eval_every_steps=20 --set train.target_top1=75 \
  --set train.stop_at_target=false
"$PY" - "$OUT" <<'PYEOF'
import json, pathlib, sys
import csv
keys = ["train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "val_top1_ema", "lr", "grad_norm",
        "loss_scale", "samples", "steps"]
derived = ["world_size", "comm", "parameters", "global_batch", "micro_batch", "accumulate", "scaled_lr",
           "steps_per_epoch", "total_steps", "train_samples", "test_samples", "precision", "channels_last",
           "checkpointed_stages", "flops_per_image", "forward_flops_per_image"]
summary = ["epochs_completed", "best_val_top1", "final_val_top1", "target_epoch", "target_step"]
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    j = json.loads(f.read_text())
    for e in j["epochs"]:
        print(f.stem, e["epoch"], " ".join(f"{k}={e[k]!r}" for k in keys if k in e))
    print(f.stem, "provenance", " ".join(f"{k}={j['provenance'][k]!r}" for k in derived if k in j["provenance"]))
    print(f.stem, "summary", j["status"], " ".join(f"{k}={j['summary'][k]!r}" for k in summary if k in j["summary"]))
    for e in j["evals"]:
        print(f.stem, "eval", " ".join(f"{k}={e[k]!r}" for k in ["step", "epoch", "val_loss", "val_top1", "val_top5"]))
    with open(f.with_suffix(".steps.csv")) as rows:
        for r in csv.DictReader(rows):
            print(f.stem, "step", r["step"], r["epoch"], r["loss"], r["lr"], r["grad_norm"], r["loss_scale"])
PYEOF
