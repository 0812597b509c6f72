#!/usr/bin/env bash
# Purpose: what the always-on step breakdown costs, side by side in one run: the same training with
# the breakdown (default) and without it (EXPRUN_BREAKDOWN=0: no phase clock, no scopes), alternated,
# REPEATS rounds, on two step sizes: small_cnn (Fashion-MNIST, batch 64: ~4 ms steps, where a fixed
# cost per step shows most) and ResNet-18 (batch 128, 1 process, 2 threads). Medians of the epoch's
# images/s, and their ratio, are printed and written to bench/results/breakdown_overhead.json.
# Usage: bench/breakdown_overhead.sh [REPEATS=5] [STEPS_SMALL=400] [STEPS_RESNET=40]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
REPEATS="${1:-5}"
SMALL="${2:-400}"
RESNET="${3:-40}"
PY="$EXPRUN_VENV/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
ips() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][0]['images_per_s'])" "$1"; }
common=(--overwrite --set train.eval=false --set train.log_every=0 --set output.tensorboard=false --set output.steps_csv=false)
declare -A res
for i in $(seq 1 "$REPEATS"); do
  for on in 1 0; do
    EXPRUN_BREAKDOWN=$on "$EXPRUN_BIN" run "$ROOT/experiments/fashion-mnist/small-cnn.yaml" --out "$TMP/s$on" "${common[@]}" \
      --set train.max_steps="$SMALL" --set train.batch_size=64 --set train.threads=2 >/dev/null 2>&1
    res[s$on]+="$(ips "$TMP/s$on"/*.json) "
    EXPRUN_BREAKDOWN=$on "$EXPRUN_BIN" run "$ROOT/experiments/fashion-mnist/resnet18.yaml" --out "$TMP/r$on" "${common[@]}" \
      --set train.max_steps="$RESNET" --set train.threads=2 >/dev/null 2>&1
    res[r$on]+="$(ips "$TMP/r$on"/*.json) "
  done
  echo "  round $i: small_cnn on ${res[s1]}/ off ${res[s0]}; resnet18 on ${res[r1]}/ off ${res[r0]}" >&2
done
mkdir -p "$ROOT/bench/results"
"$PY" - "${res[s1]}" "${res[s0]}" "${res[r1]}" "${res[r0]}" "$SMALL" "$RESNET" "$ROOT/bench/results/breakdown_overhead.json" <<'PY'
import json, statistics, sys, torch
s1, s0, r1, r0 = (list(map(float, x.split())) for x in sys.argv[1:5])
small, resnet, out = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
m = {k: statistics.median(v) for k, v in dict(s1=s1, s0=s0, r1=r1, r0=r0).items()}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = {"cpu": cpu, "torch": torch.__version__, "rounds": len(s1),
       "small_cnn": {"steps": small, "batch": 64, "with_breakdown": s1, "without": s0,
                     "overhead": 1 - m["s1"] / m["s0"]},
       "resnet18": {"steps": resnet, "batch": 128, "with_breakdown": r1, "without": r0,
                    "overhead": 1 - m["r1"] / m["r0"]}}
json.dump(res, open(out, "w"), indent=2)
print(f"{cpu}: images/s, medians of {len(s1)} alternated rounds (with / without the breakdown):")
print(f"  small_cnn b64, {small} steps: {m['s1']:.0f} / {m['s0']:.0f}  -> overhead {100 * res['small_cnn']['overhead']:+.2f} %")
print(f"  resnet18 b128, {resnet} steps: {m['r1']:.1f} / {m['r0']:.1f}  -> overhead {100 * res['resnet18']['overhead']:+.2f} %")
PY
