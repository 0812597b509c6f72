#!/usr/bin/env bash
# Purpose: the short chaos soak (bench/chaos.sh 3): a 2-rank `exprun launch --max-restarts 3` run
# hit by 3 SIGKILLs of a random worker (one at a random moment, one right after a restart, one
# while a checkpoint is staged) ends with final weights byte-identical to an uninterrupted run's,
# the same per-step CSV and epochs, and one restart per kill. A flipped byte in each file of the
# newest checkpoint (and meta.json cut short) makes both ranks fall back to the previous one, naming
# the file; two SIGTERMs to the launcher while a checkpoint is staged leave only committed
# checkpoints, and --resume auto ends as the uninterrupted run.
# Usage: chaos_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

# Synthetic data with a 15 ms sleep per batch (workers 0): the soak's 576 steps take >= 8.6 s however
# fast the CPU, longer than its 3 kills take (seed 1: 1.1 s in, right after a restart, <= 400 polls).
CHAOS_DATA='{type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 4096, test_size: 256, batch_delay_ms: 15}' \
  EXPRUN_VENV="$(dirname "$(dirname "$PY")")" bash "$ROOT/bench/chaos.sh" 3 1 "$EXPRUN" >"$TMP/out" 2>"$TMP/err"
code=$?
check "[[ $code == 0 ]]" "chaos soak of 3 kills: exit $code: $(tail -5 "$TMP/out")"
expect_grep "$TMP/out" "chaos: 3 kills survived (1 while a checkpoint was staged, 1 right after a restart), 3 restarts" "every kill accounted for"
expect_grep "$TMP/out" "final weights, per-step CSV and epochs identical" "nothing lost"
cat "$TMP/out"

cat >"$TMP/s.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: s
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 1024, test_limit: 256}
train: {epochs: 2, batch_size: 32, threads: 1, workers: 0, log_every: 0}
output: {save_weights: true, tensorboard: false, checkpoint: {every_steps: 4, keep: 3}}
YAML
two() { "$EXPRUN" launch --nproc-per-node 2 "$TMP/s.yaml" "$@"; }
expect_code 0 "uninterrupted 2-rank run" -- two --out "$TMP/ref"

# A damaged file of the newest checkpoint, each in turn (a flipped byte; meta.json also cut short):
# both ranks fall back to the previous checkpoint, naming the file, and end as the uninterrupted run.
EXPRUN_FAULT=step@22 two --out "$TMP/d" >/dev/null 2>&1
latest=$(cat "$TMP/d/s.ckpt/latest")
for file in meta.json state.bin rank-00000.bin rank-00001.bin meta.json:cut; do
  rm -rf "$TMP/f" && cp -r "$TMP/d" "$TMP/f"
  f="$TMP/f/s.ckpt/$latest/${file%:cut}"
  if [[ $file == *:cut ]]; then
    truncate -s 10 "$f"
  else
    printf '\x55' | dd of="$f" bs=1 seek=30 conv=notrunc 2>/dev/null
  fi
  expect_code 0 "resume past a damaged $file" -- two --out "$TMP/f" --resume auto
  expect_grep "$TMP/err" "trying an older one: .*$latest/${file%:cut}: \(corrupt\|truncated\)" "the damaged $file named"
  check "cmp -s \"$TMP/ref/s.weights.pt\" \"$TMP/f/s.weights.pt\"" "past a damaged $file: weights as uninterrupted"
done

# A damaged result file: said so on --resume, rebuilt from the checkpoint's copy of the epochs.
rm -rf "$TMP/f" && cp -r "$TMP/d" "$TMP/f"
printf '\x55' | dd of="$TMP/f/s.json" bs=1 seek=40 conv=notrunc 2>/dev/null
expect_code 0 "resume past a damaged result file" -- two --out "$TMP/f" --resume auto
expect_grep "$TMP/err" "the result file '$TMP/f/s.json' is damaged" "the damaged result file named"
check "cmp -s \"$TMP/ref/s.weights.pt\" \"$TMP/f/s.weights.pt\"" "past a damaged result file: weights as uninterrupted"
rebuilt=$(json "$TMP/f/s.json" '[e["train_loss"] for e in j["epochs"]]')
uninterrupted=$(json "$TMP/ref/s.json" '[e["train_loss"] for e in j["epochs"]]')
check "[[ '$rebuilt' == '$uninterrupted' ]]" "the rebuilt result file's epochs equal the uninterrupted run's: $rebuilt vs $uninterrupted"

# SIGTERM to the launcher while a checkpoint is staged, then a second one at once: whatever was cut
# short, --resume auto takes a complete checkpoint and ends as the uninterrupted run.
# On synthetic data with a 10 ms sleep per batch (workers 0): after the first checkpoint (step 4)
# 476 steps remain, >= 4.7 s however fast the CPU, so the signals (<= 3 s later) come mid-run.
slow_data='data={type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 1024, test_size: 256, batch_delay_ms: 10}'
"$EXPRUN" launch --nproc-per-node 2 "$TMP/s.yaml" --out "$TMP/g" --set train.epochs=30 --set "$slow_data" >"$TMP/g.out" 2>"$TMP/g.err" &
launcher=$!  # the launcher itself (a shell function would put a subshell between)
# (once a first checkpoint is committed, so that there is one to fall back on)
for _ in $(seq 1 6000); do [[ -s $TMP/g/s.ckpt/latest ]] && break; sleep 0.01; done
staging_end=$((SECONDS + 3))
while ((SECONDS < staging_end)); do compgen -G "$TMP/g/s.ckpt/.staging-*" >/dev/null && break; sleep 0.005; done
alive=$(ps -o stat= -p $launcher)
check "[[ -n \"$alive\" && \"$alive\" != Z* ]]" "the launcher still runs when signalled (state '$alive')"
kill -TERM $launcher
kill -TERM $launcher
wait $launcher
check "[[ -s \"$TMP/g/s.ckpt/latest\" ]]" "a checkpoint was committed before the signals: $(tail -2 "$TMP/g.err")"
# Every committed checkpoint is whole (what is cut short stays in .staging-*, an atomic writer's
# temporary or a .replaced-* copy, none of which is ever taken).
for d in "$TMP"/g/s.ckpt/step-*; do
  for f in meta.json state.bin rank-00000.bin rank-00001.bin; do
    check "[[ -s \"$d/$f\" ]]" "only whole checkpoints: $(basename "$d") has $f ($(ls -a "$TMP/g/s.ckpt" | tr '\n' ' '))"
  done
done
check "[[ -d \"$TMP/g/s.ckpt/\$(cat \"$TMP/g/s.ckpt/latest\")\" ]]" "latest names a committed checkpoint"
latest=$(cat "$TMP/g/s.ckpt/latest")
expect_code 0 "resume after two signals during a save" -- two --out "$TMP/g" --set train.epochs=30 --set "$slow_data" --resume auto
expect_grep "$TMP/err" "resumed from .*$latest" "resumed from the committed latest"
expect_code 0 "the same run uninterrupted" -- two --out "$TMP/g30" --set train.epochs=30 --set "$slow_data" --set data.batch_delay_ms=0
check "cmp -s \"$TMP/g30/s.weights.pt\" \"$TMP/g/s.weights.pt\"" "two signals during a save: weights as uninterrupted"
finish cli_chaos
