#!/usr/bin/env bash
# Purpose: the README's first quick-start command. Sets up and builds (scripts/setup.sh), then runs
# the Fashion-MNIST comparison — the reference table's three configurations scaled to this
# machine (1 process; 2-process DDP on Gloo; 2-process DDP + bf16 + accumulation + scaled lr +
# warmup) — and prints the comparison table; the result files and the report (Markdown, HTML with
# charts) go to results/fashion-mnist/.
# Usage: scripts/main.sh                      the comparison (about 10 minutes of training on 2 cores)
#        scripts/main.sh SPEC [run options]   train one spec instead and print its per-epoch table
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
if [[ $# -gt 0 ]]; then
  SPEC="$1"
  shift
  exec "$EXPRUN_BIN" run "$SPEC" --overwrite "$@"
fi
OUT="${EXPRUN_COMPARE_OUT:-results/fashion-mnist}"
E=experiments/fashion-mnist
"$EXPRUN_BIN" run "$E/compare-1proc.yaml" --out "$OUT" --overwrite
"$EXPRUN_BIN" launch --nproc-per-node 2 "$E/compare-2proc-ddp.yaml" --out "$OUT" --overwrite
"$EXPRUN_BIN" launch --nproc-per-node 2 "$E/compare-2proc-opt.yaml" --out "$OUT" --overwrite
runs=("$OUT/fm-1proc.json" "$OUT/fm-2proc-ddp.json" "$OUT/fm-2proc-opt.json")
"$EXPRUN_BIN" report "${runs[@]}" --baseline fm-1proc --format html -o "$OUT/comparison.html"
"$EXPRUN_BIN" report "${runs[@]}" --baseline fm-1proc --format md -o "$OUT/comparison.md"
echo
echo "Fashion-MNIST comparison on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores):"
cat "$OUT/comparison.md"
echo
echo "Report with charts: $OUT/comparison.html"
