#!/usr/bin/env bash
# Purpose: checkpoints end to end: a run killed (SIGKILL) mid-epoch and resumed finishes with the
# same per-epoch losses and accuracies and bitwise the same weights as an uninterrupted run — for
# 1 process, for 2 ranks (exprun launch), for elastic restarts under exprun launch and torchrun;
# SIGKILL at every stage of a save and at random moments; corrupt and truncated checkpoints
# (fallback to an older one, or a clear error); spec mismatch (refused, --force); non-finite
# values (abort names step and tensor, skip counts); one run per checkpoint folder (lock); ENOSPC/EIO
# injected at each stage of a save and in the result file's write (EXPRUN_FAULT=POINT@N:ENOSPC).
# Usage: resume_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"
# same_as REF_DIR DIR WHAT: per-epoch figures equal (all but timings/memory) and weights bitwise equal.
same_as() {
  local msg
  msg=$("$PY" - "$1/tiny.json" "$2/tiny.json" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "val_top1_ema", "lr", "grad_norm",
        "steps", "samples", "skipped_steps"]
if b["status"] != "completed": print("status", b["status"])
elif len(a["epochs"]) != len(b["epochs"]): print("epochs", len(a["epochs"]), len(b["epochs"]))
else:
    for x, y in zip(a["epochs"], b["epochs"]):
        for k in keys:
            if x.get(k) != y.get(k): print("epoch", x["epoch"], k, x.get(k), y.get(k))
PYEOF
)
  if [[ -z $msg ]] && cmp -s "$1/tiny.weights.pt" "$2/tiny.weights.pt"; then ok; else bad "$3: differs from the uninterrupted run: $msg $(cmp "$1/tiny.weights.pt" "$2/tiny.weights.pt" 2>&1)"; fi
}

cat >"$TMP/tiny.yaml" <<YAML
name: tiny
seed: 3
model: {type: small_cnn, width: 8, hidden: 32}
data: {type: fashion_mnist, train_limit: 640, test_limit: 256, hflip: true, random_crop_padding: 2}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
scheduler: {type: cosine, warmup_epochs: 0.5}
train: {epochs: 3, batch_size: 32, threads: 1, workers: 1, log_every: 0, ema_decay: 0.9}
output: {save_weights: true, checkpoint: {every_steps: 4, keep: 2}}
distributed: {timeout_s: 30}
YAML
S="$TMP/tiny.yaml"

# --- 1 process ----------------------------------------------------------------------------
"$EXPRUN" run "$S" --out "$TMP/ref1" >/dev/null 2>"$TMP/ref1.err"
check "[[ $? == 0 ]]" "reference run: $(tail -3 "$TMP/ref1.err")"
EXPRUN_FAULT=step@23 "$EXPRUN" run "$S" --out "$TMP/k1" >/dev/null 2>"$TMP/k1.err"
check "[[ $? == 137 ]]" "killed at step 23 (SIGKILL)"
check "[[ \$(cat $TMP/k1/tiny.ckpt/latest) == step-000000020 ]]" "latest checkpoint before the kill is step 20"
"$EXPRUN" run "$S" --out "$TMP/k1" --resume >/dev/null 2>"$TMP/k1r.err"
check "[[ $? == 0 ]]" "resume: $(tail -3 "$TMP/k1r.err")"
expect_grep "$TMP/k1r.err" "resumed from .*step-000000020: epoch 1, step 20 (20 micro-batches" "resume position"
same_as "$TMP/ref1" "$TMP/k1" "1 process killed at step 23"

# SIGKILL at each stage of a save (the 3rd save, step 12), then resume.
for point in save-begin save-partial save-staged save-renamed; do
  EXPRUN_FAULT=$point@3 "$EXPRUN" run "$S" --out "$TMP/$point" >/dev/null 2>&1
  check "[[ $? == 137 ]]" "killed at $point"
  check "[[ \$(cat $TMP/$point/tiny.ckpt/latest) == step-000000008 ]]" "$point: latest still names step 8"
  "$EXPRUN" run "$S" --out "$TMP/$point" --resume >/dev/null 2>"$TMP/$point.err"
  check "[[ $? == 0 ]]" "resume after $point: $(tail -3 "$TMP/$point.err")"
  same_as "$TMP/ref1" "$TMP/$point" "killed at $point"
done

# --- a full or failing disk: each stage of a save, and the result file ------------------------
# The failing call names the file (and so the folder) and the error, the run exits non-zero, the
# checkpoint "latest" names and the result file stay intact, and a resume finishes like the
# uninterrupted run.
for fault in save-write@20:ENOSPC save-fsync@5:EIO save-rename@3:ENOSPC result-write@2:ENOSPC; do
  d="$TMP/disk-${fault%%@*}"
  EXPRUN_FAULT=$fault "$EXPRUN" run "$S" --out "$d" >/dev/null 2>"$d.err"
  code=$?
  check "[[ $code != 0 && $code != 137 ]]" "$fault: the run stops with an error (exit $code)"
  want="No space left on device"
  [[ $fault == *EIO ]] && want="Input/output error"
  expect_grep "$d.err" "$d/tiny.*$want" "$fault: the message names the file and the error"
  if [[ $fault == result-write* ]]; then
    check "[[ \$($PY -c \"import json; print(len(json.load(open('$d/tiny.json'))['epochs']))\") == 1 ]]" \
      "$fault: the result file keeps its first epoch"
  else
    latest=$(cat "$d/tiny.ckpt/latest")
    check "[[ -f $d/tiny.ckpt/$latest/meta.json ]]" "$fault: latest ($latest) is a complete checkpoint"
  fi
  "$EXPRUN" run "$S" --out "$d" --resume >/dev/null 2>"$d.resume.err"
  check "[[ $? == 0 ]]" "resume after $fault: $(tail -3 "$d.resume.err")"
  same_as "$TMP/ref1" "$d" "resumed after $fault"
done
# The same step saved twice (every 4 steps and at the epoch's end, step 20): the second save's
# rename fails, and the first copy of step 20, moved aside for it, is put back where latest points.
d="$TMP/disk-resave"
EXPRUN_FAULT=save-rename@6:ENOSPC "$EXPRUN" run "$S" --out "$d" --set output.checkpoint.every_epochs=1 >/dev/null 2>"$d.err"
check "[[ $? != 0 ]]" "a failing re-save stops the run"
check "[[ \$(cat $d/tiny.ckpt/latest) == step-000000020 && -f $d/tiny.ckpt/step-000000020/meta.json ]]" \
  "after a failed re-save, latest (step 20) is still there"
"$EXPRUN" run "$S" --out "$d" --resume --set output.checkpoint.every_epochs=1 >/dev/null 2>"$d.resume.err"
check "[[ $? == 0 ]]" "resume after the failed re-save: $(tail -3 "$d.resume.err")"
same_as "$TMP/ref1" "$d" "resumed after a failed re-save"

# Killed after the checkpoint of the very last step, before that epoch's evaluation and record.
EXPRUN_FAULT=step@60 "$EXPRUN" run "$S" --out "$TMP/last" --set output.checkpoint.every_steps=60 >/dev/null 2>&1
check "[[ $? == 137 ]]" "killed after the last step"
"$EXPRUN" run "$S" --out "$TMP/last" --resume --set output.checkpoint.every_steps=60 >/dev/null 2>"$TMP/last.err"
check "[[ $? == 0 ]]" "resume at the last step: $(tail -3 "$TMP/last.err")"
same_as "$TMP/ref1" "$TMP/last" "resumed after the last step"

# SIGKILL at random moments while checkpoints are written after every step. On synthetic data with
# a 25 ms sleep per batch, after the first checkpoint >= 54 of the 60 batches are still to make
# (prefetch 4), >= 1.35 s however fast the CPU: a kill 0-0.8 s after it lands mid-run.
sed 's/^data: .*/data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 640, test_size: 256, batch_delay_ms: 25}/' \
  "$S" >"$TMP/slow.yaml"
"$EXPRUN" run "$TMP/slow.yaml" --out "$TMP/refs" --set data.batch_delay_ms=0 >/dev/null 2>"$TMP/refs.err"
check "[[ $? == 0 ]]" "reference run on synthetic data: $(tail -3 "$TMP/refs.err")"
for i in 1 2 3; do
  d="$TMP/random$i"
  pause=$("$PY" -c "import random; print(round(random.uniform(0, 0.8), 2))")
  "$EXPRUN" run "$TMP/slow.yaml" --out "$d" --set output.checkpoint.every_steps=1 >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do [[ -e $d/tiny.ckpt/latest ]] && break; sleep 0.05; done
  sleep "$pause"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  code=$?
  check "[[ $code == 137 ]]" "random kill $i landed mid-run (exit $code)"
  "$EXPRUN" run "$TMP/slow.yaml" --out "$d" --resume --overwrite --set output.checkpoint.every_steps=1 >/dev/null 2>"$d.err"
  check "[[ $? == 0 ]]" "resume after a random kill $i: $(tail -3 "$d.err")"
  # every_steps differs from the reference spec, the training itself does not.
  same_as "$TMP/refs" "$d" "random kill $i"
done

# Corrupt and truncated checkpoints: auto falls back to the previous one; an explicit path is an error.
EXPRUN_FAULT=step@23 "$EXPRUN" run "$S" --out "$TMP/c" >/dev/null 2>&1
latest="$TMP/c/tiny.ckpt/$(cat "$TMP/c/tiny.ckpt/latest")"
truncate -s 1000 "$latest/state.bin"
"$EXPRUN" run "$S" --out "$TMP/c" --resume "$latest" >/dev/null 2>"$TMP/c1.err"
check "[[ $? == 2 ]]" "explicit truncated checkpoint: exit 2"
expect_grep "$TMP/c1.err" "state.bin: truncated" "truncated checkpoint named"
"$EXPRUN" run "$S" --out "$TMP/c" --resume >/dev/null 2>"$TMP/c2.err"
check "[[ $? == 0 ]]" "fallback resume: $(tail -3 "$TMP/c2.err")"
expect_grep "$TMP/c2.err" "trying an older one: .*step-000000020/state.bin: truncated" "fallback warning"
expect_grep "$TMP/c2.err" "resumed from .*step-000000016" "fell back to step 16"
same_as "$TMP/ref1" "$TMP/c" "resumed from the older checkpoint"
EXPRUN_FAULT=step@23 "$EXPRUN" run "$S" --out "$TMP/c3" >/dev/null 2>&1
latest="$TMP/c3/tiny.ckpt/$(cat "$TMP/c3/tiny.ckpt/latest")"
printf '\x55' | dd of="$latest/rank-00000.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
"$EXPRUN" run "$S" --out "$TMP/c3" --resume "$latest" >/dev/null 2>"$TMP/c3.err"
check "[[ $? == 2 ]]" "corrupt checkpoint: exit 2"
expect_grep "$TMP/c3.err" "rank-00000.bin: corrupt (checksum mismatch)" "corrupt checkpoint named"

# A different spec is refused with the differing keys, unless --force.
EXPRUN_FAULT=step@10 "$EXPRUN" run "$S" --out "$TMP/m" >/dev/null 2>&1
"$EXPRUN" run "$S" --out "$TMP/m" --resume --set optimizer.lr=0.2 --set train.epochs=4 >/dev/null 2>"$TMP/m.err"
check "[[ $? == 2 ]]" "spec mismatch: exit 2"
expect_grep "$TMP/m.err" "optimizer.lr: checkpoint 0.1, spec 0.2" "differing key optimizer.lr listed"
expect_grep "$TMP/m.err" "train.epochs: checkpoint 3, spec 4" "differing key train.epochs listed"
"$EXPRUN" run "$S" --out "$TMP/m" --resume --force --set train.epochs=4 >/dev/null 2>"$TMP/m2.err"
check "[[ $? == 0 ]]" "--force resumes: $(tail -3 "$TMP/m2.err")"
check "[[ \$($PY -c \"import json; print(len(json.load(open('$TMP/m/tiny.json'))['epochs']))\") == 4 ]]" "--force run has 4 epochs"

# --- 2 ranks ------------------------------------------------------------------------------
"$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/ref2" >/dev/null 2>"$TMP/ref2.err"
check "[[ $? == 0 ]]" "2-rank reference: $(tail -3 "$TMP/ref2.err")"
EXPRUN_FAULT=step@13:rank1 "$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/k2" >/dev/null 2>"$TMP/k2.err"
check "[[ $? != 0 ]]" "2 ranks, rank 1 killed: the launch fails"
"$EXPRUN" launch --nproc-per-node 2 "$S" --out "$TMP/k2" --resume >/dev/null 2>"$TMP/k2r.err"
check "[[ $? == 0 ]]" "2-rank resume: $(tail -3 "$TMP/k2r.err")"
expect_grep "$TMP/k2r.err" "resumed from .*step-000000012" "2-rank resume position"
same_as "$TMP/ref2" "$TMP/k2" "2 ranks killed at step 13"

# Elastic: the launcher restarts every worker, which resume from the newest checkpoint by themselves.
EXPRUN_FAULT=step@13:rank1 "$EXPRUN" launch --nproc-per-node 2 --max-restarts 1 "$S" --out "$TMP/e" >/dev/null 2>"$TMP/e.err"
check "[[ $? == 0 ]]" "exprun launch --max-restarts 1: $(tail -3 "$TMP/e.err")"
expect_grep "$TMP/e.err" "restarting all workers" "the launcher restarted the workers"
expect_grep "$TMP/e.err" "resumed from .*step-000000012" "restarted workers resumed"
same_as "$TMP/ref2" "$TMP/e" "elastic restart under exprun launch"
if [[ -x $TORCHRUN ]]; then
  EXPRUN_FAULT=step@13:rank1 "$TORCHRUN" --no-python --nproc-per-node 2 --max-restarts 1 --master-port "$(free_port)" \
    "$EXPRUN" run "$S" --out "$TMP/tr" >/dev/null 2>"$TMP/tr.err"
  check "[[ $? == 0 ]]" "torchrun --max-restarts 1: $(tail -3 "$TMP/tr.err")"
  expect_grep "$TMP/tr.err" "resumed from .*step-000000012" "torchrun restart resumed"
  same_as "$TMP/ref2" "$TMP/tr" "elastic restart under torchrun"
else
  bad "torchrun not found at $TORCHRUN"
fi

# --- non-finite values --------------------------------------------------------------------
"$EXPRUN" run "$S" --out "$TMP/nan" --set optimizer.lr=1e30 --set train.ema_decay=0 >/dev/null 2>"$TMP/nan.err"
check "[[ $? == 1 ]]" "non-finite values abort: exit 1"
expect_grep "$TMP/nan.err" "non-finite values at step [0-9]* (epoch 1): loss .*first non-finite tensor: gradient of '" "abort names step and tensor"
"$EXPRUN" run "$S" --out "$TMP/nan2" --set optimizer.lr=1e30 --set train.ema_decay=0 --set train.on_nonfinite=skip \
  --set output.checkpoint.every_steps=0 >/dev/null 2>"$TMP/nan2.err"
check "[[ $? == 0 ]]" "on_nonfinite: skip completes: $(tail -3 "$TMP/nan2.err")"
check "[[ \$($PY -c \"import json; print(json.load(open('$TMP/nan2/tiny.json'))['epochs'][-1]['skipped_steps'] > 0)\") == True ]]" "skipped steps counted"

# --- one run per checkpoint folder ---------------------------------------------------------
"$EXPRUN" run "$S" --out "$TMP/lk1" --set train.epochs=200 --set output.checkpoint.dir="$TMP/shared.ckpt" \
  >/dev/null 2>"$TMP/lk1.err" &
lk=$!
for _ in $(seq 1 600); do [[ -e $TMP/shared.ckpt/lock ]] && break; sleep 0.1; done
kill -STOP "$lk"  # frozen with the lock held: it cannot finish and release it before the second run looks
expect_code 2 "a second run on the same checkpoint folder is refused" -- "$EXPRUN" run "$S" --out "$TMP/lk2" \
  --set output.checkpoint.dir="$TMP/shared.ckpt"
expect_grep "$TMP/err" "is in use by another run (host .*, pid $lk," "the refusal names the first run"
check "[[ ! -e $TMP/lk2/tiny.json ]]" "the refused run wrote no result"
kill -9 "$lk"
wait "$lk" 2>/dev/null
expect_code 0 "after the first was killed, a resume takes its lock over" -- "$EXPRUN" run "$S" --out "$TMP/lk1" \
  --overwrite --set train.epochs=200 --set train.max_steps=12 --set output.checkpoint.dir="$TMP/shared.ckpt" --resume --force
expect_grep "$TMP/err" "taking over the lock of host .*, pid $lk, .*(that process is gone)" "the takeover is logged"
check "[[ ! -e $TMP/shared.ckpt/lock ]]" "the lock goes when the run ends"

# --- a checkpoint of an earlier exprun ------------------------------------------------------
# tests/fixtures/checkpoint-2026-12-04: the epoch-1 checkpoint of its spec.yaml as main wrote it on
# that day (meta.json with the result file's records at its top level, before the history had a key
# of its own), and that day's uninterrupted run. Resumed by this exprun, the run carries the
# checkpoint's history on and ends with the uninterrupted run's figures. (Regenerate the fixture,
# with its date in the name, when a change of the numerics is meant: see its spec.yaml.)
FX="$ROOT/tests/fixtures/checkpoint-2026-12-04"
cp -r "$FX/step-000000004" "$TMP/old.ckpt"
expect_code 0 "a checkpoint of 2026-12-04 resumes" -- "$EXPRUN" run "$FX/spec.yaml" --out "$TMP/old" --resume "$TMP/old.ckpt"
msg=$("$PY" - "$FX/uninterrupted.json" "$TMP/old/history-fixture.json" "$FX/step-000000004/meta.json" <<'PYEOF'
import json, sys
ref, got, meta = (json.load(open(p)) for p in sys.argv[1:4])
keys = ["train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "val_top1_ema", "lr", "grad_norm", "steps", "samples"]
out = []
if got["status"] != "completed": out.append(f"status {got['status']}")
if len(got["epochs"]) != 2: out.append(f"{len(got['epochs'])} epochs")
for x, y in zip(ref["epochs"], got["epochs"]):
    out += [f"epoch {x['epoch']} {k}: {x.get(k)} != {y.get(k)}" for k in keys if x.get(k) != y.get(k)]
if got["epochs"][0] != meta["result_epochs"][0]: out.append("epoch 1's record is not the checkpoint's")
if [a["attempt"] for a in got.get("attempts", [])] != [1, 2] or got["attempts"][0]["ended"] != "killed":
    out.append(f"attempts {got.get('attempts')}")
if got["methods"] != ref["methods"]: out.append(f"methods {got['methods']} != {ref['methods']}")
print("; ".join(out))
PYEOF
)
check "[[ -z \"$msg\" ]]" "the resumed old checkpoint ends as that day's uninterrupted run: $msg"
NEWMETA="$TMP/old/history-fixture.ckpt/step-000000008/meta.json"  # JSON and the store's checksum trailer
check "grep -aq '\"history\": {' '$NEWMETA' && ! grep -aq '\"result_epochs\"' '$NEWMETA'" "new checkpoints keep the history under its own key"

finish resume_test
