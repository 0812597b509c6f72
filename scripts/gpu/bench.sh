#!/usr/bin/env bash
# Purpose: the GPU check, on the lent GPU machine, of a binary built on the CPU machine
# (scripts/gpu/pack.sh -> the carried folder). One call, every check bounded, stops at a deadline:
# the GPU-only unit tests (fused SGD against torch::optim::SGD, ...), ResNet-50 bf16/fp16 against
# PyTorch eager and torch.compile of the same step, NCCL and Gloo, resume, batch_size auto, the
# memory estimate, the JPEG pipeline, profile, tune. Everything lands in /tmp/w on the device and
# comes back as $OUT/all.tgz + $OUT/summary.txt (commit what it shows under results/gpu/).
# Usage (device tool): run with carry [".gpu-carry"], command "bash .gpu-carry/bench.sh [DEADLINE_S]"
# (ONLY=tag,tag runs only those checks: paths unit bnact bf16 gpt2 fused graph compile fp16 log1 rows dist resume auto plan pipe
# gpudecode profile tune fused300). Adapted from ../shared/gpu/probe.sh.
set -uo pipefail
cd "$(dirname "$0")"
G=$PWD; P=$G/proj; O=${OUT:-/tmp/out}; W=/tmp/w
DEADLINE=${1:-420}; ONLY=${ONLY:-}
mkdir -p "$O" "$W"
PY=python3
TL=$($PY -c 'import torch,os;print(os.path.dirname(torch.__file__)+"/lib")')
NV=$TL/../../nvidia
export LD_LIBRARY_PATH=$G/lib:$TL:$NV/cu13/lib:$NV/cudnn/lib:$NV/nccl/lib:${LD_LIBRARY_PATH:-}
E=$G/bin/exprun
S=$P/experiments/bench/resnet50-gpu.yaml
log() { printf '[%4ds] %s\n' "$SECONDS" "$*" | tee -a "$O/summary.txt"; }
left() { (( SECONDS + $1 < DEADLINE )) || { log "SKIP $2 (deadline)"; return 1; }; [[ -z $ONLY || $ONLY == *$2* ]]; }
# run TAG SECONDS SPEC [exprun run args...]: result in $W/TAG/*.json, log $W/TAG.log
run() {
  local tag=$1 tmo=$2 spec=$3; shift 3
  timeout "$tmo" "$E" run "$spec" --out "$W/$tag" --overwrite "$@" >"$W/$tag.log" 2>&1
  local rc=$?
  log "$tag: exit $rc $( ((rc)) && grep -m2 -iE 'error|what\(\)|terminate|exception|fault' "$W/$tag.log" | tr '\n' ' ' | cut -c1-400)"
  return $rc
}
# ips TAG FROM: images/s between step FROM and the last step of the per-step CSV, + the epoch's figures
ips() {
  $PY - "$W/$1" "${2:-20}" <<'PY' | tee -a "$O/summary.txt"
import csv, glob, json, sys
d, frm = sys.argv[1], int(sys.argv[2])
try:
    r = json.load(open(glob.glob(d + "/*.json")[0]))
    rows = list(csv.DictReader(open(glob.glob(d + "/*.steps.csv")[0])))
    a = [x for x in rows if int(x["step"]) == frm][0]; b = rows[-1]
    gb = r["provenance"]["global_batch"]
    v = (int(b["step"]) - frm) * gb / (float(b["time_s"]) - float(a["time_s"]))
    e = r["epochs"][-1]; bd = e.get("breakdown", {}).get("parts", {})
    top = sorted(((k, p["fraction"]) for k, p in bd.items()), key=lambda t: -t[1])[:5]
    print(f"  {d.split('/')[-1]}: csv {v:.0f} img/s (steps {frm}-{b['step']}); epoch {e['images_per_s']:.0f} img/s, "
          f"peak alloc {e.get('peak_allocated_bytes',0)/2**30:.2f} GiB, reserved {e.get('peak_memory_bytes',0)/2**30:.2f} GiB, "
          f"mfu {e.get('mfu')}, loss {e['train_loss']:.3f}; " + " ".join(f"{k} {f:.2f}" for k, f in top))
    for e in r["epochs"]:  # the workers' time per batch under training, epoch by epoch
        n = e.get("loader_batches", 0)
        if n:
            print(f"    epoch {e['epoch']} loader: {n} batches, {e['loader_build_s']/n*1e3:.0f} ms wall a batch a worker, "
                  f"CPU/wall {e['loader_build_cpu_s']/max(e['loader_build_s'],1e-9):.2f}, "
                  f"pin {e['loader_pin_s']/n*1e3:.1f} ms a batch, data wait {e['data_wait_s']:.2f} of {e['time_s']:.2f} s")
except Exception as ex:
    print(f"  {d}: no figures ({ex})")
PY
}

# 0. Machine and binary
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$O/summary.txt"
log "torch $($PY -c 'import torch;print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())')"
ldd "$E" | grep -iE 'not found' | tee -a "$O/summary.txt"
"$E" --version 2>&1 | head -1 | tee -a "$O/summary.txt"
"$E" plugins model >/dev/null 2>"$W/preflight.log" || { log "binary does not start: $(head -5 "$W/preflight.log")"; ldd "$E" | tee -a "$O/summary.txt"; exit 3; }
# 0a. The opt-in paths that have not run on a GPU, each against the measured default on the same
# spec, seed and data: one line each, "PATH <name>: ran, matched ..." (or DIFFERS, or did not run).
# The defaults switch to a path only once this says it ran and matched (README's GPU section).
if left 120 paths; then
  FM=$P/experiments/fashion-mnist/compare-1proc.yaml
  FMA=(--set data.root="$P/fashion-mnist" --set data.train_limit=2048 --set train.device=cuda --set train.max_steps=16
       --set train.eval=false --set train.log_every=1 --set seed=3)
  pathrun() {  # TAG SPEC ARGS...: a run into $W/paths/TAG, its exit code echoed
    local tag=$1 spec=$2; shift 2
    timeout 120 "$E" run "$spec" --out "$W/paths/$tag" --overwrite "$@" >"$W/paths-$tag.log" 2>&1
    echo $?
  }
  verdict() { $PY "$G/paths.py" "$@" | tee -a "$O/summary.txt"; }
  mkdir -p "$W/paths"
  pathrun base "$FM" "${FMA[@]}" >/dev/null
  verdict "train.input=uint8" "$W/paths/base" "$W/paths/uint8" 1e-3 "$(pathrun uint8 "$FM" "${FMA[@]}" --set train.input=uint8)"
  verdict "train.input=auto" "$W/paths/base" "$W/paths/auto" 1e-3 "$(pathrun auto "$FM" "${FMA[@]}" --set train.input=auto)"
  verdict "train.copy_ahead=2" "$W/paths/base" "$W/paths/ahead" 1e-3 "$(pathrun ahead "$FM" "${FMA[@]}" --set train.copy_ahead=2)"
  verdict "optimizer.impl=fused (sgd)" "$W/paths/base" "$W/paths/sgdfused" 1e-3 \
    "$(pathrun sgdfused "$FM" "${FMA[@]}" --set optimizer.impl=fused)"
  verdict "optimizer.impl=auto (sgd)" "$W/paths/base" "$W/paths/sgdauto" 1e-3 \
    "$(pathrun sgdauto "$FM" "${FMA[@]}" --set optimizer.impl=auto)"
  AW='optimizer={type: adamw, lr: 0.001, base_batch: 128, weight_decay: 0.05}'
  pathrun adamw "$FM" "${FMA[@]}" --set "$AW" >/dev/null
  verdict "optimizer.impl=fused (adamw)" "$W/paths/adamw" "$W/paths/adamwfused" 1e-3 \
    "$(pathrun adamwfused "$FM" "${FMA[@]}" --set "$AW" --set optimizer.impl=fused)"
  # The fused batch norm needs a model with batch norms and channels_last activations.
  BN=(--set model.type=resnet18 --set model.small_input_stem=true --set train.channels_last=true)
  pathrun bn "$FM" "${FMA[@]}" "${BN[@]}" >/dev/null
  verdict "model.fused=true (fp32)" "$W/paths/bn" "$W/paths/bnfused" 1e-3 "$(pathrun bnfused "$FM" "${FMA[@]}" "${BN[@]}" --set model.fused=true)"
  pathrun bnbf16 "$FM" "${FMA[@]}" "${BN[@]}" --set train.precision=bf16 >/dev/null
  verdict "model.fused=true (bf16)" "$W/paths/bnbf16" "$W/paths/bnfusedbf16" 2e-2 \
    "$(pathrun bnfusedbf16 "$FM" "${FMA[@]}" "${BN[@]}" --set train.precision=bf16 --set model.fused=true)"
  # A CUDA graph of the step: against the same eager step (the fused optimizer it needs on both sides).
  verdict "train.cuda_graph=true" "$W/paths/sgdfused" "$W/paths/graph" 1e-3 \
    "$(pathrun graph "$FM" "${FMA[@]}" --set optimizer.impl=fused --set train.cuda_graph=true)"
  # JPEGs decoded on the device against the CPU's decode, the same draws (a small tree, ResNet-18).
  $PY "$P/tests/fixtures/make_image_tree.py" bench "$W/pathjpeg" 1024 >"$W/pathjpeg.log" 2>&1
  JA=(--set data.root="$W/pathjpeg" --set model.type=resnet18 --set train.batch_size=64 --set train.max_steps=12
      --set train.log_every=1 --set train.workers=4 --set seed=3)
  pathrun jpegcpu "$G/rn50-jpeg.yaml" "${JA[@]}" >/dev/null
  verdict "data.decode=gpu" "$W/paths/jpegcpu" "$W/paths/jpeggpu" 2e-2 \
    "$(pathrun jpeggpu "$G/rn50-jpeg.yaml" "${JA[@]}" --set data.decode=gpu --set train.input=uint8)"
fi
# 0b. The GPU-only unit tests (each says "skipped: no CUDA device" on the CPU machine)
if left 60 unit && [[ -x $G/bin/exprun_tests ]]; then
  $PY "$P/tests/fixtures/make_image_tree.py" test "$W/images" >"$W/images.log" 2>&1  # the data.decode: gpu case's photos
  # Each case in a process of its own: a kernel fault poisons its process's CUDA context, and the
  # cases after it would fail for it too.
  "$G/bin/exprun_tests" --test-case='*GPU only*' --list-test-cases --no-version 2>/dev/null |
    grep 'GPU only' | sed 's/^ *//' >"$W/unit.list"
  while IFS= read -r tc; do
    pat=$(printf '%s' "$tc" | sed 's/[][*?,\\]/?/g')  # doctest filters: wildcards for its special characters
    EXPRUN_TEST_FASHION_MNIST=$P/fashion-mnist EXPRUN_TEST_IMAGES=$W/images timeout 90 "$G/bin/exprun_tests" \
      --test-case="$pat" --no-version >>"$W/unit.log" 2>&1
    rc=$?
    log "GPU unit test: exit $rc: $tc"
    ((rc)) && grep -E 'ERROR|FAILED|error' "$W/unit.log" | tail -6 | tee -a "$O/summary.txt"
  done <"$W/unit.list"
  grep -E 'MESSAGE|skipped' "$W/unit.log" | head -20 | tee -a "$O/summary.txt"
fi
# 0c. The fused batch norm alone against libtorch's at ResNet-50's 53 layers, batch 256, bf16 and fp16
if left 60 bnact && [[ -x $G/bin/exprun_bench_bnact ]]; then
  for dt in bf16 fp16; do
    timeout 60 "$G/bin/exprun_bench_bnact" 256 $dt 3 >"$W/bnact-$dt.json" 2>"$W/bnact-$dt.log"
    log "bn+act layers, $dt: exit $? $(cut -c1-200 "$W/bnact-$dt.json") $(tail -1 "$W/bnact-$dt.log" | cut -c1-200)"
  done
fi
# JPEG tree for the input pipeline, built in the background while the GPU runs
( $PY "$P/tests/fixtures/make_image_tree.py" bench "$W/jpeg" "${JPEGS:-4000}" >"$W/jpeg.log" 2>&1; echo done >"$W/jpeg.done" ) &

# 1. ResNet-50 bf16 + channels_last, batch 256: exprun (two lengths) vs eager in the same call
if left 60 bf16; then
  run bf16-30 90 "$S" --set train.max_steps=30
  run bf16-130 120 "$S" --set train.max_steps=130 && ips bf16-130 30
  $PY - "$W"/bf16-30/*.json "$W"/bf16-130/*.json <<'PY' | tee -a "$O/summary.txt"
import json, sys
try:
    a, b = (json.load(open(f))["epochs"][-1] for f in sys.argv[1:3])
    print(f"  bf16 difference method: {(130-30)*256/(b['time_s']-a['time_s']):.0f} img/s")
except Exception as ex: print("  bf16 difference: n/a", ex)
PY
  timeout 120 $PY "$P/bench/gpu_eager.py" bf16 100 30 >"$W/eager-bf16.json" 2>"$W/eager-bf16.log"
  log "eager bf16: $(cat "$W/eager-bf16.json" | cut -c1-300) $(tail -2 "$W/eager-bf16.log" | tr '\n' ' ' | cut -c1-200)"
fi
# 1h. GPT-2 124M at block 1024 in bf16, micro-batch 16, on random tokens: exprun (the default AdamW
# and the fused one) against nanoGPT's model.py eager and under torch.compile, the same step
if left 150 gpt2; then
  $PY -c "import array, json, os, random, sys; d = sys.argv[1]; os.makedirs(d, exist_ok=True); random.seed(0)
for split, n in (('train', 4 << 20), ('val', 1 << 20)): array.array('H', (random.randrange(50257) for _ in range(n))).tofile(open(f'{d}/{split}.bin', 'wb'))
json.dump({'vocab_size': 50257}, open(f'{d}/meta.json', 'w'))" "$W/tok"
  GA=(--set data.dir="$W/tok" --set train.batch_size=16 --set train.accumulate=1 --set train.max_steps=60 --set train.eval=false
      --set train.log_every=10 --set train.workers=2)
  for impl in per_param fused; do
    run gpt2-$impl 150 "$P/experiments/gpt2/gpt2-124m-1gpu.yaml" "${GA[@]}" --set optimizer.impl=$impl
    $PY - "$W/gpt2-$impl" <<'PY' | tee -a "$O/summary.txt"
import csv, glob, json, sys
try:
    d = sys.argv[1]; r = json.load(open(glob.glob(d + "/*.json")[0])); rows = list(csv.DictReader(open(glob.glob(d + "/*.steps.csv")[0])))
    a = [x for x in rows if int(x["step"]) == 20][0]; b = rows[-1]; e = r["epochs"][-1]
    t = (float(b["time_s"]) - float(a["time_s"])) / (int(b["step"]) - 20)
    print(f"  {d.split('/')[-1]}: {16 * 1024 / t:.0f} tokens/s, {1e3 * t:.1f} ms a step (steps 20-{b['step']}); "
          f"peak alloc {e.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB, mfu {e.get('mfu')}, loss {e['train_loss']:.3f}")
except Exception as ex:
    print(f"  {sys.argv[1]}: no figures ({ex})")
PY
  done
  if [[ -f $G/nanogpt/model.py ]]; then
    timeout 90 $PY "$P/bench/gpu_gpt_eager.py" "$G/nanogpt" 16 40 10 >"$W/gpt2-eager.json" 2>"$W/gpt2-eager.log"
    log "nanoGPT eager: $(cut -c1-300 "$W/gpt2-eager.json") $(tail -2 "$W/gpt2-eager.log" | tr '\n' ' ' | cut -c1-200)"
    timeout 150 $PY "$P/bench/gpu_gpt_eager.py" "$G/nanogpt" 16 40 10 compile >"$W/gpt2-compile.json" 2>"$W/gpt2-compile.log"
    log "nanoGPT torch.compile: $(cut -c1-300 "$W/gpt2-compile.json") $(tail -2 "$W/gpt2-compile.log" | tr '\n' ' ' | cut -c1-200)"
  else
    log "gpt2: no nanogpt/model.py carried (pack with NANOGPT=a copy of karpathy/nanoGPT)"
  fi
fi
# 1f. The fused batch norm (model.fused: runner/nn/BnAct.h), bf16, against the runs above
if left 60 fused; then
  run bf16-fused-130 120 "$S" --set train.max_steps=130 --set model.fused=true && ips bf16-fused-130 30
fi
# 1g. train.cuda_graph (runner/step/StepGraph.h): the step captured once and replayed, bf16 at batch
# 256 (unfused and with model.fused), fp16, and at batch 32, where launches dominate, against eager at 32
if left 120 graph; then
  run bf16-graph-130 120 "$S" --set train.max_steps=130 --set train.cuda_graph=true --set optimizer.impl=fused && ips bf16-graph-130 30
  run bf16-graph-fused-130 120 "$S" --set train.max_steps=130 --set train.cuda_graph=true --set optimizer.impl=fused --set model.fused=true &&
    ips bf16-graph-fused-130 30
  run fp16-graph-130 120 "$S" --set train.max_steps=130 --set train.precision=fp16 --set train.cuda_graph=true --set optimizer.impl=fused &&
    ips fp16-graph-130 30
  run b32-eager 90 "$S" --set train.max_steps=400 --set train.batch_size=32 && ips b32-eager 100
  run b32-graph 90 "$S" --set train.max_steps=400 --set train.batch_size=32 --set train.cuda_graph=true --set optimizer.impl=fused && ips b32-graph 100
  grep -hE 'captured|cuda_graph' "$W"/*graph*.log | head -5 | tee -a "$O/summary.txt"
fi
# 1c. torch.compile of the eager step (what a user would pick instead)
if left 120 compile; then
  sed 's/^model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)$/&\nmodel = torch.compile(model)/' \
    "$P/bench/gpu_eager.py" >"$W/gpu_compile.py"
  timeout 150 $PY "$W/gpu_compile.py" bf16 100 30 >"$W/compile-bf16.json" 2>"$W/compile-bf16.log"
  log "torch.compile bf16: $(cut -c1-300 "$W/compile-bf16.json")"
fi
# 2. fp16 with loss scaling, unfused and fused
if left 60 fp16; then
  run fp16-130 120 "$S" --set train.max_steps=130 --set train.precision=fp16 && ips fp16-130 30
  run fp16-fused-130 120 "$S" --set train.max_steps=130 --set train.precision=fp16 --set model.fused=true &&
    ips fp16-fused-130 30
  timeout 120 $PY "$P/bench/gpu_eager.py" fp16 100 30 >"$W/eager-fp16.json" 2>"$W/eager-fp16.log"
  log "eager fp16: $(cut -c1-300 "$W/eager-fp16.json")"
fi
# 3. A log line and a CSV row every step
if left 40 log1; then run bf16-log1 120 "$S" --set train.max_steps=130 --set train.log_every=1 && ips bf16-log1 30; fi
# 4. The reference table's single-device rows on synthetic data: batch 64 fp32, and fp16 64 x 4 + channels_last
if left 60 rows; then
  run row1-fp32-b64 120 "$S" --set train.max_steps=150 --set train.batch_size=64 --set train.precision=fp32 \
    --set train.channels_last=false && ips row1-fp32-b64 30
  run row3-fp16-b64x4 120 "$S" --set train.max_steps=40 --set train.batch_size=64 --set train.accumulate=4 \
    --set train.precision=fp16 && ips row3-fp16-b64x4 10
fi
# 5. NCCL at world size 1 and Gloo with 2 ranks on the one device, through exprun launch
if left 60 dist; then
  timeout 90 "$E" launch --nproc-per-node 1 "$S" --out "$W/nccl1" --overwrite --set train.max_steps=20 \
    --set distributed.backend=nccl >"$W/nccl1.log" 2>&1; log "nccl world 1: exit $? $(grep -m1 -iE 'error' "$W/nccl1.log" | cut -c1-300)"
  timeout 90 "$E" launch --nproc-per-node 2 "$S" --out "$W/gloo2" --overwrite --set train.max_steps=20 \
    --set train.batch_size=64 --set distributed.backend=gloo >"$W/gloo2.log" 2>&1; log "gloo 2 ranks: exit $? $(grep -m1 -iE 'error' "$W/gloo2.log" | cut -c1-300)"
  timeout 90 "$E" launch --nproc-per-node 2 "$S" --out "$W/nccl2" --overwrite --set train.max_steps=20 \
    --set train.batch_size=64 --set distributed.backend=nccl >"$W/nccl2.log" 2>&1
  log "nccl 2 ranks on 1 device (expected: exit 2, one CUDA device per process): exit $? $(grep -m1 -iE 'error|device' "$W/nccl2.log" | cut -c1-300)"
fi
# 6. A CUDA checkpoint resumed: a run killed after its step-20 checkpoint, resumed, against 40 steps uninterrupted
if left 60 resume; then
  C=(--set train.batch_size=64 --set train.max_steps=40 --set output.checkpoint.every_steps=20 --set train.log_every=1)
  run full40 90 "$S" "${C[@]}"
  "$E" run "$S" --out "$W/part" --overwrite "${C[@]}" >"$W/part.log" 2>&1 & pid=$!
  for _ in $(seq 600); do ls -d "$W"/part/*.ckpt/step-000000020 >/dev/null 2>&1 && break; sleep 0.1; done
  kill -9 $pid; wait $pid 2>/dev/null
  timeout 90 "$E" run "$S" --out "$W/part" --resume auto "${C[@]}" >"$W/resume.log" 2>&1
  log "resume after kill -9: exit $? $(grep -m1 -iE 'error' "$W/resume.log" | cut -c1-300)"
  $PY - "$W"/full40/*.steps.csv "$W"/part/*.steps.csv <<'PY' | tee -a "$O/summary.txt"
import csv, sys
try:
    a, b = ({r["step"]: float(r["loss"]) for r in csv.DictReader(open(f))} for f in sys.argv[1:3])
    common = sorted(set(a) & set(b), key=int)
    d = max(abs(a[s] - b[s]) for s in common)
    print(f"  resume: {len(common)} common steps (last {common[-1]}), max |loss diff| {d:.3g}")
except Exception as ex: print("  resume: n/a", ex)
PY
fi
# 7. batch_size auto on CUDA (the planner's out-of-memory probes)
if left 60 auto; then
  run auto 120 "$S" --set train.max_steps=10 --set train.batch_size=auto --set train.global_batch=1024 --set train.memory_budget=40GiB
  log "  auto: $(grep -c 'plan: micro-batch' "$W/auto.log") probes ($(grep -o 'plan: micro-batch [0-9]*' "$W/auto.log" | awk '{print $3}' | tr '\n' ' '))"
  grep -iE 'micro|accumul' "$W/auto.log" | tail -3 | tee -a "$O/summary.txt"
fi
# 8. The memory estimate (CPU-measured) against the device's caching allocator, bf16
if left 90 plan; then
  timeout 120 "$E" plan "$S" --for cuda --device-memory 139GiB --global-batch 128 --json "$W/estimate.json" >"$W/estimate.log" 2>&1
  log "plan --for cuda: exit $?"
  timeout 120 "$E" plan "$S" --memory-budget 139GiB --global-batch 128 --json "$W/direct.json" >"$W/direct.log" 2>&1
  log "plan on the device: exit $?"
  $PY - "$W/estimate.json" "$W/direct.json" <<'PY' | tee -a "$O/summary.txt"
import json, sys
try:
    est, direct = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    # the allocator's bytes: the step's, the workspace allowance, the input beside it (the probe on
    # the device adds the same input terms to its measured peak)
    rows = {r["micro_batch"]: r["device_allocated_bytes"] for r in est["candidates"]}
    for p in direct["probes"]:
        if p["batch"] in rows and p["peak_memory_bytes"] > 0:
            print(f"  estimate mb {p['batch']}: {rows[p['batch']]/2**30:.2f} GiB vs device {p['peak_memory_bytes']/2**30:.2f} GiB ({rows[p['batch']]/p['peak_memory_bytes']-1:+.1%})")
except Exception as ex: print("  plan compare: n/a", ex)
PY
fi
# 9. Input pipeline: the imagefolder plugin alone with 16 workers, then ResNet-50 bf16 fed by it
if left 80 pipe; then
  for _ in $(seq 60); do [[ -e $W/jpeg.done ]] && break; sleep 1; done
  log "jpeg tree: $(find "$W/jpeg" -name '*.jpg' -o -name '*.JPEG' 2>/dev/null | wc -l) files $(du -sh "$W/jpeg" 2>/dev/null | cut -f1)"
  IF=$P/experiments/bench/imagefolder.yaml
  cat "$W"/jpeg/train/*/* >/dev/null 2>&1
  [[ -x $G/bin/exprun_bench_data ]] && for w in 16 8; do
    timeout 60 "$G/bin/exprun_bench_data" "$IF" "$w" 256 2 data.root="$W/jpeg" >"$W/pipe-$w.log" 2>&1
    log "data pipeline $w workers: $(tail -1 "$W/pipe-$w.log" | cut -c1-200)"
  done
  # What a training run adds to the pipeline alone: page-locked batches, intra-op
  # threads on all cores (train.threads: 0), both
  [[ -x $G/bin/exprun_bench_data ]] && for v in "PIN=1 THREADS=1" "PIN=0 THREADS=0" "PIN=1 THREADS=0"; do
    eval "export EXPRUN_BENCH_${v% *} EXPRUN_BENCH_${v#* }"
    timeout 60 "$G/bin/exprun_bench_data" "$IF" 16 256 2 data.root="$W/jpeg" >"$W/pipe-16-$v.log" 2>&1
    log "data pipeline 16 workers, $v: $(tail -1 "$W/pipe-16-$v.log" | cut -c1-200)"
    unset EXPRUN_BENCH_PIN EXPRUN_BENCH_THREADS
  done
  # The same, decomposed: the pipeline through the trainer's feed onto the device (page-locked,
  # copied ahead), then with the main thread busy 60 ms a batch (a launch-bound step's host: about
  # ResNet-50 bf16's step at 256), with 16 and 15 workers; each line gives the workers' wall and
  # CPU seconds a batch (loader_build_s, loader_build_cpu_s over loader_batches), to set beside the
  # training run's epoch below (ips prints its loader line)
  [[ -x $G/bin/exprun_bench_data ]] && for v in "16 0" "16 60" "15 60"; do
    set -- $v
    EXPRUN_BENCH_DEVICE=cuda EXPRUN_BENCH_BUSY_MS=$2 timeout 60 "$G/bin/exprun_bench_data" "$IF" "$1" 256 2 \
      data.root="$W/jpeg" >"$W/pipe-feed-$1-$2.log" 2>&1
    log "data pipeline onto the device, $1 workers, main thread busy $2 ms a batch: $(tail -1 "$W/pipe-feed-$1-$2.log" | cut -c1-330)"
  done
  set --
  # uint8 batches (a quarter of the bytes pinned and copied) alone, page-locked
  [[ -x $G/bin/exprun_bench_data ]] && {
    EXPRUN_BENCH_PIN=1 EXPRUN_BENCH_INPUT=uint8 timeout 60 "$G/bin/exprun_bench_data" "$IF" 16 256 2 data.root="$W/jpeg" \
      >"$W/pipe-16-uint8.log" 2>&1
    log "data pipeline 16 workers, PIN=1 uint8: $(tail -1 "$W/pipe-16-uint8.log" | cut -c1-200)"
  }
  # Trained: uint8 batches copied 2 ahead on the copy stream against float batches copied when due (the default)
  run rn50-jpeg 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" --set train.input=uint8 --set train.copy_ahead=2 &&
    ips rn50-jpeg 5
  run rn50-jpeg-float 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" && ips rn50-jpeg-float 5
fi
# 9b. The JPEGs decoded on the device (nvJPEG) with 16, 2 and 1 workers reading files
if left 80 gpudecode; then
  for _ in $(seq 60); do [[ -e $W/jpeg.done ]] && break; sleep 1; done
  # The decode-only rate, batches ready on the device (uint8 from page-locked memory,
  # normalised and channels_last there), CPU path with 16 workers against the device's decode with
  # 16, 2 and 1 workers, with and without region-of-interest decoding
  IF=$P/experiments/bench/imagefolder.yaml
  cat "$W"/jpeg/train/*/* >/dev/null 2>&1
  [[ -x $G/bin/exprun_bench_data ]] && for v in "cpu 16 true none" "gpu 16 true none" "gpu 2 true none" "gpu 1 true none" \
    "gpu 16 false none" "gpu 2 false none" "cpu 16 true ta_wide" "gpu 2 true ta_wide"; do
    set -- $v
    EXPRUN_BENCH_DEVICE=cuda timeout 60 "$G/bin/exprun_bench_data" "$IF" "$2" 256 2 data.root="$W/jpeg" data.decode="$1" \
      data.decode_roi="$3" data.auto_augment="$4" >"$W/decode-$1-$2-$3-$4.log" 2>&1
    log "decode-only on the device's feed, decode $1, $2 workers, roi $3, policy $4: $(tail -1 "$W/decode-$1-$2-$3-$4.log" | cut -c1-220)"
  done
  set --
  for w in 16 2 1; do
    run rn50-jpeg-gpu$w 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" --set data.decode=gpu --set train.input=uint8 --set train.workers=$w &&
      ips rn50-jpeg-gpu$w 5
  done
  run rn50-jpeg-gpu16-noroi 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" --set data.decode=gpu --set train.input=uint8 \
    --set data.decode_roi=false && ips rn50-jpeg-gpu16-noroi 5
  # TrivialAugmentWide: on the device (2 workers) against the CPU's (15 workers, one core left)
  left 50 gpudecode && run rn50-jpeg-ta-gpu2 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" --set data.decode=gpu --set train.input=uint8 \
    --set data.auto_augment=ta_wide --set train.workers=2 && ips rn50-jpeg-ta-gpu2 5
  left 50 gpudecode && run rn50-jpeg-ta-cpu15 120 "$G/rn50-jpeg.yaml" --set data.root="$W/jpeg" \
    --set data.auto_augment=ta_wide --set train.workers=15 && ips rn50-jpeg-ta-cpu15 5
  grep -hE 'nvJPEG|decoded on|regions' "$W"/rn50-jpeg-gpu16.log | head -4 | tee -a "$O/summary.txt"
fi
# 10. exprun profile on the GPU spec
if left 60 profile; then
  timeout 100 "$E" profile "$S" --steps 3 --start 10 --out "$W/profile" >"$W/profile.log" 2>&1
  log "profile: exit $? $(ls "$W/profile" 2>/dev/null | tr '\n' ' ')"
  grep -A12 -iE 'module' "$W/profile.log" | head -14 | tee -a "$O/summary.txt"
  for t in "$W"/profile/*.trace.json*; do [[ -f $t ]] && $PY "$G/kernels.py" "$t" 3 | tee -a "$O/summary.txt"; done
  timeout 100 "$E" profile "$S" --steps 3 --start 10 --out "$W/profile-fused" --set model.fused=true >"$W/profile-fused.log" 2>&1
  log "profile fused: exit $?"
  for t in "$W"/profile-fused/*.trace.json*; do [[ -f $t ]] && $PY "$G/kernels.py" "$t" 3 | tee -a "$O/summary.txt"; done
fi
# 11. exprun tune on the GPU spec
if left 100 tune; then
  B=$(( DEADLINE - SECONDS - 30 )); (( B > 150 )) && B=150
  timeout $((B + 40)) "$E" tune "$S" --time-budget "${B}s" --device-memory 139GiB --write "$W/tuned.yaml" --json "$W/tune.json" >"$W/tune.txt" 2>"$W/tune.log"
  log "tune (${B}s): exit $?"; head -12 "$W/tune.txt" | tee -a "$O/summary.txt"
fi
# 13. 300 bf16 steps fused against three unfused runs with other seeds: the mean loss of the last 50 steps
if left 150 fused300; then
  for sd in 1 2 3; do run loss-plain-$sd 70 "$S" --set train.max_steps=300 --set seed=$sd --set train.log_every=1; done
  run loss-fused-0 70 "$S" --set train.max_steps=300 --set seed=0 --set train.log_every=1 --set model.fused=true
  $PY - "$W" <<'PY' | tee -a "$O/summary.txt"
import csv, glob, sys
def tail(tag):
    rows = list(csv.DictReader(open(glob.glob(f"{sys.argv[1]}/{tag}/*.steps.csv")[0])))
    return sum(float(r["loss"]) for r in rows[-50:]) / len(rows[-50:])
try:
    plain = [tail(f"loss-plain-{s}") for s in (1, 2, 3)]; f = tail("loss-fused-0")
    print(f"  300 steps, mean loss of the last 50: fused {f:.4f}; unfused seeds 1-3 {min(plain):.4f}..{max(plain):.4f}: "
          + ("within" if min(plain) <= f <= max(plain) else "OUTSIDE"))
except Exception as ex: print("  fused300: n/a", ex)
PY
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$O/summary.txt"
tar czf "$O/all.tgz" -C "$W" --exclude='*.ckpt' --exclude='jpeg' --exclude='*.pt' --exclude='step-*' . 2>/dev/null
ls -la "$O"
log "done"
