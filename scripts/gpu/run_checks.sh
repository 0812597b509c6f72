#!/usr/bin/env bash
# Purpose: the GPU checks of issue 8 in one call on the device machine (one H200, torch 2.11 + CUDA
# 13 in its python3, CMake and ninja, no package access): configure and build against that torch's
# libtorch and the Debian packages carried in .deps (scripts/gpu/gather_deps.sh, run here first),
# run the CPU test suite there, then measure ResNet-50 training (synthetic 224x224, batch 256)
# with exprun (bf16 + channels_last, and fp16 with loss scaling) against the same step in PyTorch
# eager (bench/gpu_eager.py), and run NCCL (world size 1, exprun launch) and Gloo (2 ranks on the
# one GPU), and whether logging every step costs throughput (it should not: the step keeps its
# sums on the device). Everything lands in $OUT (results/gpu/*.json, logs, summary-*.json).
# Throughput = (steps of the long run - steps of the short run) x 256 / (time difference): the
# start-up and the first steps (cuDNN autotuning, allocator growth) cancel out.
# Usage (device tool): run --carry .deps --command "scripts/gpu/run_checks.sh"
# Environment: EXPRUN_GPU_PYTHON (python3), EXPRUN_GPU_BUILD (build-gpu), EXPRUN_GPU_CMAKE_ARGS,
# EXPRUN_GPU_BUILD_ONLY=1 (build + CPU suite only), EXPRUN_GPU_SHORT_STEPS / _LONG_STEPS (30 / 130),
# EXPRUN_GPU_TUNE_BUDGET (4min: `exprun tune` on the ResNet-50 spec, the last check).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/gpu-out}"
DEPS="$ROOT/.deps/root"
BUILD="${EXPRUN_GPU_BUILD:-$ROOT/build-gpu}"
PY="${EXPRUN_GPU_PYTHON:-python3}"
SHORT="${EXPRUN_GPU_SHORT_STEPS:-30}"
LONG="${EXPRUN_GPU_LONG_STEPS:-130}"
mkdir -p "$OUT/results/gpu"
log() { printf '[gpu-checks %s] %s\n' "$(date +%T)" "$*" | tee -a "$OUT/checks.log" >&2; }
[[ -d $DEPS ]] || { log "missing $DEPS: run scripts/gpu/gather_deps.sh on the build machine and carry .deps"; exit 2; }
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
(nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv) >"$OUT/nvidia-smi.txt" 2>&1
TP="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
log "torch $("$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "(no GPU visible)")')"

# 1. Build and the CPU test suite.
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;$DEPS/usr" \
  -DEXPRUN_PYTHON="$(command -v "$PY")" -DGLOO_INCLUDE_DIR="$DEPS/usr/include" ${EXPRUN_GPU_CMAKE_ARGS:-} >"$OUT/configure.log" 2>&1 ||
  { log "configure failed"; tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" >"$OUT/build.log" 2>&1 || { log "build failed"; tail -40 "$OUT/build.log"; exit 1; }
log "built"
E="$BUILD/exprun"
if [[ ! -e /usr/share/datasets/fashion-mnist ]]; then
  mkdir -p /usr/share/datasets && ln -s "$DEPS/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist
fi
# chromium (the HTML report's browser test) is not on the GPU image.
(cd "$BUILD" && ctest -j 8 --timeout 400 -E report_html >"$OUT/ctest.log" 2>&1)
log "CPU test suite: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
# EXPRUN_GPU_BUILD_ONLY=1: stop here (how the script is checked on a machine without a GPU).
[[ ${EXPRUN_GPU_BUILD_ONLY:-0} == 1 ]] && { log "build-only run: done"; exit 0; }

# 2-3. exprun vs PyTorch eager, bf16 + channels_last and fp16 + loss scaling.
SPEC="$ROOT/experiments/bench/resnet50-gpu.yaml"
run_exprun() {  # precision steps [tag extra-args...] -> seconds of the epoch and its peak memory
  local prec="$1" steps="$2" tag="${3:-}"
  shift 2
  [[ $# -gt 0 ]] && shift
  local dir="$OUT/results/gpu/$prec-$steps$tag"
  "$E" run "$SPEC" --out "$dir" --overwrite --set train.precision="$prec" --set train.max_steps="$steps" "$@" \
    >"$dir.log" 2>&1 || { log "exprun $prec $steps steps $tag failed: $(tail -3 "$dir.log")"; return 1; }
  "$PY" -c "import json,sys; e=json.load(open(sys.argv[1]))['epochs'][0]; print(e['time_s'], e['peak_memory_bytes'])" \
    "$dir/resnet50-gpu.json"
}
for prec in bf16 fp16; do
  read -r t1 _ < <(run_exprun "$prec" "$SHORT") || continue
  read -r t2 mem < <(run_exprun "$prec" "$LONG") || continue
  "$PY" "$ROOT/bench/gpu_eager.py" "$prec" "$((LONG - SHORT))" "$SHORT" >"$OUT/eager-$prec.json" 2>"$OUT/eager-$prec.log"
  "$PY" - "$prec" "$t1" "$t2" "$mem" "$SHORT" "$LONG" "$OUT/eager-$prec.json" "$OUT/results/gpu/summary-$prec.json" <<'PYEOF'
import json, sys
prec, t1, t2, mem, short, long_, eager, out = sys.argv[1], *map(float, sys.argv[2:7]), sys.argv[7], sys.argv[8]
ips = (long_ - short) * 256 / (t2 - t1)
e = json.load(open(eager))
r = {"precision": prec, "exprun_images_per_s": ips, "exprun_peak_allocated_bytes": int(mem),
     "eager_images_per_s": e["images_per_s"], "eager_peak_allocated_bytes": e["peak_allocated_bytes"],
     "ratio": ips / e["images_per_s"], "device": e["device"], "torch": e["torch"], "steps_timed": long_ - short}
json.dump(r, open(out, "w"), indent=1)
print(json.dumps(r))
PYEOF
done 2>&1 | tee -a "$OUT/checks.log"

# 3b. A log line every step (each one reads the device's sums) against the spec's every 10 steps.
read -r a1 _ < <(run_exprun bf16 "$SHORT" -log10) && read -r a2 _ < <(run_exprun bf16 "$LONG" -log10) &&
  read -r b1 _ < <(run_exprun bf16 "$SHORT" -log1 --set train.log_every=1) &&
  read -r b2 _ < <(run_exprun bf16 "$LONG" -log1 --set train.log_every=1) &&
  "$PY" - "$a1" "$a2" "$b1" "$b2" "$SHORT" "$LONG" "$OUT/results/gpu/summary-logging.json" <<'PYEOF' 2>&1 | tee -a "$OUT/checks.log"
import json, sys
a1, a2, b1, b2, short, long_ = map(float, sys.argv[1:7])
every10, every1 = (long_ - short) * 256 / (a2 - a1), (long_ - short) * 256 / (b2 - b1)
r = {"images_per_s_log_every_10": every10, "images_per_s_log_every_1": every1, "ratio": every1 / every10}
json.dump(r, open(sys.argv[7], "w"), indent=1)
print(json.dumps(r))
PYEOF

# 4. NCCL (world size 1, exprun launch) and Gloo (2 ranks on the one GPU), a few steps each.
"$E" launch --nproc-per-node 1 "$SPEC" --out "$OUT/results/gpu/nccl" --overwrite --set train.max_steps=5 \
  --set distributed.backend=nccl >"$OUT/nccl.log" 2>&1
log "NCCL world size 1 via exprun launch: exit $?"
"$E" launch --nproc-per-node 2 "$SPEC" --out "$OUT/results/gpu/gloo2" --overwrite --set train.max_steps=5 \
  --set train.batch_size=64 --set distributed.backend=gloo >"$OUT/gloo2.log" 2>&1
log "Gloo 2 ranks on one GPU via exprun launch: exit $?"

# 5. The GPU's peak GEMM FLOP/s per precision (MFU's denominator; cached under $OUT).
for prec in fp32 bf16 fp16; do
  EXPRUN_CACHE_DIR="$OUT/cache" "$E" peak --device cuda --precision "$prec" >>"$OUT/results/gpu/peak.txt" 2>&1
  log "peak $prec: $(tail -1 "$OUT/results/gpu/peak.txt")"
done
# 6. The memory estimate against the GPU (issue 15): `exprun plan --for cuda` measured on this
# machine's CPU, against the caching allocator's max allocated for the same step on the GPU (the
# planner's probes, batches 1..128), ResNet-50 at 224², fp32 and bf16.
for prec in fp32 bf16; do
  "$E" plan "$SPEC" --for cuda --device-memory 139GiB --global-batch 128 --set train.precision="$prec" \
    --json "$OUT/results/gpu/estimate-$prec.json" >"$OUT/estimate-$prec.log" 2>&1
  "$E" plan "$SPEC" --memory-budget 139GiB --global-batch 128 --set train.precision="$prec" \
    --json "$OUT/results/gpu/direct-$prec.json" >"$OUT/direct-$prec.log" 2>&1
  "$PY" - "$OUT/results/gpu/estimate-$prec.json" "$OUT/results/gpu/direct-$prec.json" <<'PYEOF' 2>&1 | tee -a "$OUT/checks.log"
import json, sys
est, direct = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rows = {r["micro_batch"]: r["peak_allocated_bytes"] for r in est["candidates"]}
for p in direct["probes"]:
    if p["batch"] in (64, 128) and p["batch"] in rows and p["peak_memory_bytes"] > 0:
        print(json.dumps({"precision": est["precision"], "micro_batch": p["batch"], "estimated_bytes": rows[p["batch"]],
                          "cuda_max_allocated_bytes": p["peak_memory_bytes"],
                          "relative_error": rows[p["batch"]] / p["peak_memory_bytes"] - 1}))
PYEOF
done
# 7. exprun tune on the same spec (issue 24, section 5): bf16 / fp16 / fp32 (TF32 is no exprun setting yet),
# channels_last, micro-batch x accumulation at global batch 256, within 4 minutes; the ranked table
# has MFU against the H200's published peaks (runner/metrics/Hardware.cpp).
timeout 330 "$E" tune "$SPEC" --time-budget "${EXPRUN_GPU_TUNE_BUDGET:-4min}" --write "$OUT/results/gpu/resnet50-gpu-tuned.yaml" \
  --json "$OUT/results/gpu/tune.json" >"$OUT/results/gpu/tune.txt" 2>"$OUT/tune.log"
log "tune: exit $?; $(grep -m1 '^1 ' "$OUT/results/gpu/tune.txt")"

log "done"
