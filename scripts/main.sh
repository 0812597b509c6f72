#!/usr/bin/env bash
# Purpose: the README's first quick-start command. Sets up and builds (scripts/setup.sh), then runs
# the Fashion-MNIST comparison — the reference table's three configurations scaled to this
# machine (1 process; 2-process DDP on Gloo; 2-process DDP + bf16 + accumulation + scaled lr +
# warmup) — and prints its table next to the checked-in reference results (results/fashion-mnist/,
# with the machine they were measured on). This run's result files and report (Markdown, HTML with
# charts) go to results/local/fashion-mnist/, which git ignores: a clone stays clean.
# Usage: scripts/main.sh                      the comparison (about 10 minutes of training on 2 cores)
#        scripts/main.sh SPEC [run options]   train one spec instead (into results/local/ unless --out
#                                             is given) and print its per-epoch table
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
if [[ $# -gt 0 ]]; then
  SPEC="$1"
  shift
  out=(--out results/local)
  for a in "$@"; do [[ $a == --out || $a == --out=* ]] && out=(); done
  exec "$EXPRUN_BIN" run "$SPEC" --overwrite "${out[@]}" "$@"
fi
OUT="${EXPRUN_COMPARE_OUT:-results/local/fashion-mnist}"
REF=results/fashion-mnist
E=experiments/fashion-mnist
"$EXPRUN_BIN" run "$E/compare-1proc.yaml" --out "$OUT" --overwrite
"$EXPRUN_BIN" launch --nproc-per-node 2 "$E/compare-2proc-ddp.yaml" --out "$OUT" --overwrite
"$EXPRUN_BIN" launch --nproc-per-node 2 "$E/compare-2proc-opt.yaml" --out "$OUT" --overwrite
runs=("$OUT/fm-1proc.json" "$OUT/fm-2proc-ddp.json" "$OUT/fm-2proc-opt.json")
"$EXPRUN_BIN" report "${runs[@]}" --baseline fm-1proc --format html -o "$OUT/comparison.html"
"$EXPRUN_BIN" report "${runs[@]}" --baseline fm-1proc --format md -o "$OUT/comparison.md"
machine() {  # CPU model and cores recorded in a result file's provenance
  "$EXPRUN_VENV/bin/python" -c "import json,sys; p=json.load(open(sys.argv[1]))['provenance']; print(f\"{p['cpu_model']}, {p['cores']} cores, exprun {p['git_commit']}\")" "$1"
}
echo
echo "This run ($(machine "$OUT/fm-1proc.json")):"
cat "$OUT/comparison.md"
echo
echo "Reference, checked in at $REF/ ($(machine "$REF/fm-1proc.json")):"
cat "$REF/comparison.md"
echo
echo "This run's report with charts: $OUT/comparison.html"
