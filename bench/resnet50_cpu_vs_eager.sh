#!/usr/bin/env bash
# Purpose: the mission's model on this CPU — a ResNet-50 training step at 224², batch 16,
# channels_last, 2 threads, in exprun (experiments/bench/resnet50-cpu.yaml) against the same step in
# PyTorch eager on the same libtorch (bench/cpu_eager.py), fp32 and bf16, ROUNDS alternated rounds,
# median. exprun's images/s by difference: (LONG - SHORT) steps x batch / (their epoch times'
# difference), so that start-up and the first steps cancel; eager's after WARMUP steps.
# Usage: bench/resnet50_cpu_vs_eager.sh [ROUNDS=3] [SHORT=2] [LONG=6]   (after scripts/setup.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
EXE="$ROOT/build/exprun"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
ROUNDS="${1:-3}" SHORT="${2:-2}" LONG="${3:-6}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SPEC="$ROOT/experiments/bench/resnet50-cpu.yaml"
epoch_time() {  # precision steps -> seconds of the epoch
  "$EXE" run "$SPEC" --out "$OUT" --overwrite --set train.precision="$1" --set train.max_steps="$2" >"$OUT/log" 2>&1 ||
    { tail -5 "$OUT/log" >&2; exit 1; }
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][0]['time_s'])" "$OUT/resnet50-cpu.json"
}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
for prec in fp32 bf16; do
  ours=() theirs=()
  for ((r = 1; r <= ROUNDS; r++)); do
    ts=$(epoch_time "$prec" "$SHORT")
    tl=$(epoch_time "$prec" "$LONG")
    ours+=("$("$PY" -c "print(($LONG - $SHORT) * 16 / ($tl - $ts))")")
    theirs+=("$("$PY" "$ROOT/bench/cpu_eager.py" "$prec" 16 $((LONG - SHORT)) "$SHORT" 2 |
      "$PY" -c "import json,sys; print(json.load(sys.stdin)['images_per_s'])")")
    echo "$prec round $r: exprun ${ours[-1]} images/s, eager ${theirs[-1]} images/s"
  done
  "$PY" - "$prec" "${ours[*]}" "${theirs[*]}" <<'PYEOF'
import statistics, sys
prec, ours, theirs = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
ratios = [a / b for a, b in zip(ours, theirs)]
print(f"{prec}: exprun {statistics.median(ours):.2f} images/s, eager {statistics.median(theirs):.2f} images/s, "
      f"ratio (median of the rounds' ratios) {statistics.median(ratios):.2f}x")
PYEOF
done
