#!/usr/bin/env bash
# Purpose: `exprun sweep` end to end: --print writes specs that `exprun validate` accepts, bad grids
# are refused before anything runs (exit 2), a real 2-combination sweep of a tiny spec writes both
# result files and the report, existing results are kept without --overwrite, and a failing run
# leaves the others and the report in place (exit 1).
# Usage: sweep_test.sh EXPRUN_BINARY SOURCE_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

cat >"$TMP/tiny.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: tiny
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 512, test_limit: 256}
train: {epochs: 1, threads: 1, max_steps: 4}
YAML

# --print: resolved specs, runs.txt, nothing run.
expect_code 0 "sweep --print" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid train.batch_size=32,64 \
  --grid optimizer.lr=0.1,0.2 --print "$TMP/print" --out "$TMP/res"
[[ $(wc -l <"$TMP/print/runs.txt") == 4 ]] && ok || bad "runs.txt lists $(wc -l <"$TMP/print/runs.txt") specs, expected 4"
expect_grep "$TMP/print/runs.txt" "/tiny__batch_size-64__lr-0.1.yaml" "runs.txt names the specs"
[[ $(head -1 "$TMP/print/runs.txt") == */tiny__batch_size-32__lr-0.1.yaml ]] && ok || bad "first grid varies slowest"
while read -r spec; do
  expect_code 0 "validate printed $(basename "$spec")" -- "$EXPRUN" validate "$spec"
done <"$TMP/print/runs.txt"
expect_grep "$TMP/out" "name: tiny__batch_size-64__lr-0.2" "printed spec carries the run name"
[[ -e $TMP/res ]] && bad "--print ran something" || ok

# Bad grids: exit 2 before anything runs.
expect_code 2 "unknown key" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid train.batchsize=32,64 --out "$TMP/res"
expect_grep "$TMP/err" "--grid train.batchsize=32,64: value '32'" "unknown key names the grid entry"
expect_code 2 "invalid value" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid train.batch_size=32,-1 --out "$TMP/res"
expect_grep "$TMP/err" "value '-1'" "invalid value named"
expect_code 2 "key in two grids" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid optimizer.lr=0.1 --grid optimizer.lr=0.2 --out "$TMP/res"
expect_grep "$TMP/err" "two grids" "duplicate key message"
[[ -e $TMP/res ]] && bad "a refused sweep ran something" || ok

# A real sweep of two combinations.
expect_code 0 "sweep" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid train.batch_size=32,64 --out "$TMP/res"
for run in tiny__batch_size-32 tiny__batch_size-64; do
  [[ -s $TMP/res/$run.json ]] && ok || bad "result file $run.json"
  expect_grep "$TMP/res/$run.json" '"status": "completed"' "$run completed"
  expect_grep "$TMP/out" "| $run | " "report row of $run printed"
done
[[ -s $TMP/res/tiny-sweep.md ]] && ok || bad "tiny-sweep.md written"
expect_grep "$TMP/res/tiny-sweep.html" "<svg" "tiny-sweep.html has charts"
expect_code 2 "sweep again without --overwrite" -- "$EXPRUN" sweep "$TMP/tiny.yaml" --grid train.batch_size=32,64 --out "$TMP/res"
expect_grep "$TMP/err" "already exist" "refusal names the existing results"

# A failing run: the other one still runs, the report covers it, exit 1 naming the failure.
expect_code 1 "sweep with a failing run" -- "$EXPRUN" sweep "$TMP/tiny.yaml" \
  --grid data.root=/nonexistent,/usr/share/datasets/fashion-mnist --out "$TMP/fail"
[[ -s $TMP/fail/tiny__root-usr_share_datasets_fashion-mnist.json ]] && ok || bad "the good run ran after the failing one"
expect_grep "$TMP/err" "1 of 2 run(s) failed: tiny__root-nonexistent" "failure summary"
expect_grep "$TMP/fail/tiny-sweep.md" "Failed runs: tiny__root-nonexistent" "report lists the failed run"

finish cli_sweep
