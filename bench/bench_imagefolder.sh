#!/usr/bin/env bash
# Purpose: exprun's imagefolder input pipeline against torchvision's ImageFolder + PIL + DataLoader on
# the same JPEG files: decode + RandomResizedCrop(224) + horizontal flip + normalise, batches of 64,
# images/s, pinned to 1 core and to 2 cores (taskset). N ImageNet-like JPEGs (about 500x375,
# quality 90, real photographs: tests/fixtures/make_image_tree.py bench) are built first. Every
# configuration runs once per round, REPEATS rounds, medians; held under the build lock so that no
# build runs at the same time. Also exprun with dct_scaling off, and torchvision with 0 workers.
# Usage: bench/bench_imagefolder.sh [N=1000] [REPEATS=3] [EPOCHS=2]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
N="${1:-1000}"
REPEATS="${2:-3}"
EPOCHS="${3:-2}"
PY="$EXPRUN_VENV/bin/python"
cmake --build "$EXPRUN_BUILD_DIR" --target exprun_bench_data >&2  # not part of the default build
BENCH="$EXPRUN_BUILD_DIR/exprun_bench_data"
SPEC="$ROOT/experiments/bench/imagefolder.yaml"
TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT
"$PY" "$ROOT/tests/fixtures/make_image_tree.py" bench "$TREE" "$N"
echo "[bench] $N training JPEGs in $TREE ($(du -sh "$TREE" | cut -f1)); $REPEATS rounds of $EPOCHS epochs" >&2

# name | cpus | command
confs=(
  "exprun_1core|0|$BENCH $SPEC 1 64 $EPOCHS data.root=$TREE"
  "exprun_1core_nodct|0|$BENCH $SPEC 1 64 $EPOCHS data.root=$TREE data.dct_scaling=false"
  "torchvision_1core_w1|0|$PY $ROOT/bench/data_loop.py $TREE 1 64 $EPOCHS"
  "torchvision_1core_w0|0|$PY $ROOT/bench/data_loop.py $TREE 0 64 $EPOCHS"
  "exprun_2cores|0,1|$BENCH $SPEC 2 64 $EPOCHS data.root=$TREE"
  "torchvision_2cores_w2|0,1|$PY $ROOT/bench/data_loop.py $TREE 2 64 $EPOCHS"
)
declare -A ips
exec 9>/tmp/exprun-build.lock
flock 9
cat "$TREE"/train/*/* > /dev/null  # page cache
for r in $(seq 1 "$REPEATS"); do
  for c in "${confs[@]}"; do
    IFS='|' read -r name cpus cmd <<<"$c"
    # shellcheck disable=SC2086
    v=$(taskset -c "$cpus" $cmd 2>/dev/null | tail -1 | "$PY" -c "import json,sys; print(json.load(sys.stdin)['images_per_s'])")
    echo "[bench] round $r $name: $v images/s" >&2
    ips[$name]+="$v "
  done
done
flock -u 9
mkdir -p "$ROOT/bench/results"
args=()
for c in "${confs[@]}"; do
  name="${c%%|*}"
  args+=("$name" "${ips[$name]}")
done
"$PY" - "$ROOT/bench/results/imagefolder.json" "$N" "$REPEATS" "$EPOCHS" "${args[@]}" <<'PYEOF'
import json, platform, statistics, subprocess, sys
out, n, repeats, epochs, rest = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
runs = {rest[i]: [float(v) for v in rest[i + 1].split()] for i in range(0, len(rest), 2)}
med = {k: statistics.median(v) for k, v in runs.items()}
def ratio(a, b): return round(med[a] / med[b], 3)
best1 = max(med["torchvision_1core_w1"], med["torchvision_1core_w0"])
res = {
    "what": "decode + RandomResizedCrop(224) + flip + normalise, batch 64, images/s (median of rounds)",
    "images": n, "repeats": repeats, "epochs_per_run": epochs,
    "cpu": subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip(),
    "commit": subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "runs": runs, "median_images_per_s": med,
    "ratio_1core_vs_best_torchvision_1core": round(med["exprun_1core"] / best1, 3),
    "ratio_2cores": ratio("exprun_2cores", "torchvision_2cores_w2"),
    "dct_scaling_gain_1core": ratio("exprun_1core", "exprun_1core_nodct"),
}
json.dump(res, open(out, "w"), indent=1)
print("configuration            images/s (median)")
for k, v in med.items(): print(f"{k:24s} {v:8.1f}")
print(f"1 core : exprun / torchvision (best of 0 and 1 workers) = {res['ratio_1core_vs_best_torchvision_1core']:.2f}x")
print(f"2 cores: exprun / torchvision (2 workers)                = {res['ratio_2cores']:.2f}x")
print(f"DCT scaling on/off (exprun, 1 core)                       = {res['dct_scaling_gain_1core']:.2f}x")
PYEOF
