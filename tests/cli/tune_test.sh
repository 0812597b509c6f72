#!/usr/bin/env bash
# Purpose: `exprun tune` end to end on a tiny spec: bad input is refused with exit 2 naming what
# (an unknown precision, a duration that is not one, a budget smaller than one trial, a spec that
# does not validate, a folder that does not exist); a real search within its time budget keeps the
# global batch and the memory budget, measures its finalists in two rounds or more, writes a spec
# that validates and base:s the original, and the JSON of every trial.
# Usage: tune_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

cat >"$TMP/tiny.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: tiny
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 4096, test_limit: 256}
train: {epochs: 1, batch_size: 64}
YAML

expect_code 2 "unknown precision" -- "$EXPRUN" tune "$TMP/tiny.yaml" --precisions fp32,fp8
expect_grep "$TMP/err" "unknown precision 'fp8'" "the precision is named"
expect_code 2 "not a duration" -- "$EXPRUN" tune "$TMP/tiny.yaml" --time-budget soon
expect_grep "$TMP/err" "time-budget: 'soon' is not a duration" "the flag is named"
expect_code 2 "spec that does not validate" -- "$EXPRUN" tune "$TMP/tiny.yaml" --set train.batch_size=-1
expect_grep "$TMP/err" "train.batch_size" "the key is named"
expect_code 2 "missing folder" -- "$EXPRUN" tune "$TMP/tiny.yaml" --write "$TMP/none/tuned.yaml"
expect_grep "$TMP/err" "does not exist" "the folder is named"
# (synthetic data with a 100 ms sleep per batch: a trial's 11 steps, 2 workers, take >= 0.6 s
# however fast the CPU, more than a quarter of the 1 s budget)
expect_code 2 "budget smaller than one trial" -- "$EXPRUN" tune "$TMP/tiny.yaml" --time-budget 1s \
  --set 'data={type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 4096, test_size: 256, batch_delay_ms: 100}'
# (a busy machine stops the one trial at the budget's end; an idle one measures it and refuses)
check "grep -q -e 'is too small: one trial of the spec as written takes' -e 'is too small: one trial of the spec as written (start-up' \"$TMP/err\"" \
  "the budget is refused, saying why: $(tail -2 "$TMP/err")"

start=$(date +%s)
expect_code 0 "tune" -- "$EXPRUN" tune "$TMP/tiny.yaml" --time-budget 25s --memory-budget 8GiB \
  --write "$TMP/tuned.yaml" --json "$TMP/trials.json"
spent=$(($(date +%s) - start))
check "(( spent <= 25 * 11 / 10 + 2 ))" "tune took $spent s for a 25 s budget"
expect_grep "$TMP/out" "^1 " "the ranked table"
expect_grep "$TMP/tuned.yaml" "^base: " "the tuned spec bases the original"
expect_grep "$TMP/tuned.yaml" "^name: tiny-tuned" "the tuned spec's name"
expect_grep "$TMP/tuned.yaml" "^#   exprun \(run\|launch --nproc-per-node [0-9]*\) $TMP/tuned.yaml" "the command that runs it"
expect_code 0 "the tuned spec validates" -- "$EXPRUN" validate "$TMP/tuned.yaml"
check "[[ \$(json \"$TMP/trials.json\" \"sorted({c['setting']['global_batch'] for c in j['candidates']})\") == '[64]' ]]" \
  "every candidate at the global batch 64"
check "[[ \$(json \"$TMP/trials.json\" \"sum(t['ok'] for t in j['candidates'][j['winner']]['trials']) >= 2\") == True ]]" \
  "the winner measured in two rounds or more"
check "[[ \$(json \"$TMP/trials.json\" \"all(t['peak_memory_bytes'] <= 8 << 30 for t in j['candidates'][j['winner']]['trials'])\") == True ]]" \
  "the winner within the memory budget"
check "[[ \$(json \"$TMP/trials.json\" \"j['spent_s'] <= 25 * 1.1\") == True ]]" "spent_s within the budget"

finish cli_tune
