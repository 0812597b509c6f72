#!/usr/bin/env bash
# Purpose: exprun vs the same training loop in Python PyTorch (same libtorch 2.11.0 from the
# set-up's virtual environment), side by side on this machine: Fashion-MNIST, batch 128, SGD,
# 2 intra-op threads, images/s over STEPS steps; runs alternate (exprun, python, exprun, ...),
# REPEATS each; prints every run and the medians and writes bench/results/<model>.json.
# Usage: bench/bench_fashion_mnist.sh [MODEL=resnet18|small_cnn] [STEPS=100] [REPEATS=3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
MODEL="${1:-resnet18}"
STEPS="${2:-100}"
REPEATS="${3:-3}"
SPEC="$ROOT/experiments/fashion-mnist/resnet18.yaml"
[[ $MODEL == small_cnn ]] && SPEC="$ROOT/experiments/fashion-mnist/small-cnn.yaml"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
ex=()
py=()
for i in $(seq 1 "$REPEATS"); do
  "$EXPRUN_BIN" run "$SPEC" --out "$TMP" --overwrite --set train.max_steps="$STEPS" --set train.eval=false \
    --set train.threads=2 --set train.log_every=0 --set optimizer.lr=0.1 --set optimizer.base_batch=128 \
    --set seed="$i" >/dev/null 2>&1
  e=$("$EXPRUN_VENV/bin/python" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][0]['images_per_s'])" "$TMP"/*.json)
  p=$("$EXPRUN_VENV/bin/python" "$ROOT/bench/train_loop.py" --model "$MODEL" --steps "$STEPS" --threads 2 --seed "$i" |
    "$EXPRUN_VENV/bin/python" -c "import json,sys; print(json.loads(sys.stdin.read())['images_per_s'])")
  echo "run $i: exprun $e img/s, python $p img/s" >&2
  ex+=("$e")
  py+=("$p")
done
mkdir -p "$ROOT/bench/results"
"$EXPRUN_VENV/bin/python" - "$MODEL" "$STEPS" "${ex[*]}" "${py[*]}" "$ROOT/bench/results/$MODEL.json" <<'PY'
import json, platform, statistics, sys, torch
model, steps, ex, py, out = sys.argv[1], int(sys.argv[2]), list(map(float, sys.argv[3].split())), list(map(float, sys.argv[4].split())), sys.argv[5]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = {"model": model, "batch": 128, "threads": 2, "steps": steps, "exprun_images_per_s": ex, "python_images_per_s": py,
       "exprun_median": statistics.median(ex), "python_median": statistics.median(py),
       "ratio_of_medians": statistics.median(ex) / statistics.median(py), "torch": torch.__version__, "cpu": cpu,
       "host": platform.node()}
json.dump(res, open(out, "w"), indent=2)
print(f"{model}: exprun median {res['exprun_median']:.1f} img/s, python median {res['python_median']:.1f} img/s, "
      f"ratio {res['ratio_of_medians']:.2f}x  ({len(ex)} runs each, {steps} steps, batch 128, 2 threads, {cpu})")
PY
