#!/usr/bin/env bash
# Purpose: the short chaos soak (bench/chaos.sh 3): a 2-rank `exprun launch --max-restarts 3` run
# hit by 3 SIGKILLs of a random worker (one at a random moment, one right after a restart, one
# while a checkpoint is staged) ends with final weights byte-identical to an uninterrupted run's,
# the same per-step CSV and epochs, and one restart per kill.
# Usage: chaos_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

EXPRUN_VENV="$(dirname "$(dirname "$PY")")" bash "$ROOT/bench/chaos.sh" 3 1 "$EXPRUN" >"$TMP/out" 2>"$TMP/err"
code=$?
check "[[ $code == 0 ]]" "chaos soak of 3 kills: exit $code: $(tail -5 "$TMP/out")"
expect_grep "$TMP/out" "chaos: 3 kills survived (1 while a checkpoint was staged, 1 right after a restart), 3 restarts" "every kill accounted for"
expect_grep "$TMP/out" "final weights, per-step CSV and epochs identical" "nothing lost"
cat "$TMP/out"
finish cli_chaos
