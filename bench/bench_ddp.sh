#!/usr/bin/env bash
# Purpose: data parallelism on this machine, side by side in one run: resnet18, Fashion-MNIST,
# batch 128 per rank, STEPS steps, Gloo on 127.0.0.1:
#   A  exprun, 2 ranks x 1 thread, comm allreduce (bucketed, overlapped)
#   B  exprun, 2 ranks x 1 thread, comm allreduce_after_backward
#   C  Python PyTorch 2.11 DDP (DistributedDataParallel, gloo) via torchrun, 2 ranks x 1 thread
#   D  exprun, 1 rank x 2 threads (batch 128; the same images per step per process)
# One run of each in turn, REPEATS rounds; medians of images/s (all ranks together) and ratios
# are printed and written to bench/results/ddp.json.
# Usage: bench/bench_ddp.sh [STEPS=60] [REPEATS=3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
STEPS="${1:-60}"
REPEATS="${2:-3}"
SPEC="$ROOT/experiments/fashion-mnist/resnet18.yaml"
PY="$EXPRUN_VENV/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
common=(--overwrite --set train.max_steps="$STEPS" --set train.eval=false --set train.log_every=0)
ips() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][0]['images_per_s'])" "$1"; }
declare -A res
for i in $(seq 1 "$REPEATS"); do
  "$EXPRUN_BIN" launch --nproc-per-node 2 "$SPEC" --out "$TMP/a" "${common[@]}" --set train.threads=1 \
    --set distributed.comm.type=allreduce >/dev/null 2>&1
  res[a]+="$(ips "$TMP"/a/*.json) "
  "$EXPRUN_BIN" launch --nproc-per-node 2 "$SPEC" --out "$TMP/b" "${common[@]}" --set train.threads=1 \
    --set distributed.comm.type=allreduce_after_backward >/dev/null 2>&1
  res[b]+="$(ips "$TMP"/b/*.json) "
  c=$(timeout 600 "$EXPRUN_VENV/bin/torchrun" --nproc-per-node 2 --master-port "$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')" \
    "$ROOT/bench/train_loop.py" --model resnet18 --steps "$STEPS" --threads 1 --seed "$i" 2>/dev/null |
    "$PY" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['images_per_s'])")
  res[c]+="$c "
  "$EXPRUN_BIN" run "$SPEC" --out "$TMP/d" "${common[@]}" --set train.threads=2 >/dev/null 2>&1
  res[d]+="$(ips "$TMP"/d/*.json) "
  echo "  a: ${res[a]}  b: ${res[b]}  c: ${res[c]}  d: ${res[d]}" >&2
done
mkdir -p "$ROOT/bench/results"
"$PY" - "${res[a]}" "${res[b]}" "${res[c]}" "${res[d]}" "$STEPS" "$ROOT/bench/results/ddp.json" <<'PY'
import json, statistics, sys, torch
a, b, c, d = (list(map(float, x.split())) for x in sys.argv[1:5])
steps, out = int(sys.argv[5]), sys.argv[6]
m = {k: statistics.median(v) for k, v in dict(a=a, b=b, c=c, d=d).items()}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = {"model": "resnet18", "batch_per_rank": 128, "steps": steps, "torch": torch.__version__, "cpu": cpu,
       "exprun_allreduce_2x1": a, "exprun_after_backward_2x1": b, "python_ddp_2x1": c, "exprun_1x2": d,
       "medians": m, "allreduce_vs_python_ddp": m["a"] / m["c"], "allreduce_vs_after_backward": m["a"] / m["b"],
       "ddp_2x1_vs_single_1x2": m["a"] / m["d"]}
json.dump(res, open(out, "w"), indent=2)
print(f"resnet18 batch 128/rank, {steps} steps, {len(a)} rounds (medians, images/s over all ranks):")
print(f"  exprun allreduce 2x1            {m['a']:8.1f}")
print(f"  exprun allreduce_after_backward {m['b']:8.1f}")
print(f"  Python DDP (gloo) 2x1           {m['c']:8.1f}")
print(f"  exprun 1 rank x 2 threads       {m['d']:8.1f}")
print(f"  allreduce / Python DDP = {res['allreduce_vs_python_ddp']:.2f}x; allreduce / after_backward = "
      f"{res['allreduce_vs_after_backward']:.2f}x; 2x1 DDP / 1x2 = {res['ddp_2x1_vs_single_1x2']:.2f}x")
PY
