#!/usr/bin/env bash
# Purpose: the README's first quick-start command. Sets up and builds (scripts/setup.sh), then runs
# the Fashion-MNIST comparison — the reference table's three configurations scaled to this
# machine (1 process; 2-process DDP on Gloo; 2-process DDP + bf16 + accumulation + scaled lr +
# warmup) and a fourth: the third as `exprun tune` finds it fastest on this machine (same global
# batch; EXPRUN_TUNE_BUDGET, default 2min) — and prints its table next to the checked-in reference
# results (results/fashion-mnist/, with the machine they were measured on). This run's result files and report (Markdown, HTML with
# charts) go to results/local/fashion-mnist/, which git ignores: a clone stays clean.
# Usage: scripts/main.sh                      the comparison (6 min on a 2-core Xeon with AMX, 2 of them tuning)
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
# Row 4: the optimized row as tuned for this machine.
BUDGET="${EXPRUN_TUNE_BUDGET:-2min}"
echo "Row 4: exprun tune $E/compare-2proc-opt.yaml for $BUDGET, then the tuned spec's 4 epochs"
"$EXPRUN_BIN" tune "$E/compare-2proc-opt.yaml" --nproc 2 --time-budget "$BUDGET" \
  --write "$OUT/fm-2proc-opt-tuned.yaml" --json "$OUT/fm-2proc-opt-tune.json"
read -r -a tuned_cmd <<<"$(sed -n 's/^#   exprun \(.*\)$/\1/p' "$OUT/fm-2proc-opt-tuned.yaml" | head -1)"
"$EXPRUN_VENV/bin/python" - "$OUT/fm-2proc-opt-tune.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); c = t["candidates"][t["winner"]]; ips = c["median_images_per_s"]
print(f"Expected: about {4 * 60000 / ips:.0f} s of training (4 epochs of 60,000 images at the {ips:.0f} images/s "
      f"tune measured; start-up and evaluations not counted). Chosen: {c['differs']}")
PY
"$EXPRUN_BIN" "${tuned_cmd[@]}" --out "$OUT" --overwrite
runs=("$OUT/fm-1proc.json" "$OUT/fm-2proc-ddp.json" "$OUT/fm-2proc-opt.json" "$OUT/fm-2proc-opt-tuned.json")
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
