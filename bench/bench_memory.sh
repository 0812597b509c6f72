#!/usr/bin/env bash
# Purpose: what each memory option saves and costs on this machine, side by side in one run:
# ResNet-50 on synthetic 3x96x96 images (activations dominate memory), batch 64, 2 threads, STEPS
# optimizer steps; peak resident set (VmHWM, includes ~0.5 GiB of libtorch) and step time for
# fp32, bf16 autocast, activation checkpointing (layer3+layer4, layer1+layer2, all), accumulation
# 4 x 16 and channels_last; one run of each in turn, REPEATS rounds, medians.
# Usage: bench/bench_memory.sh [STEPS=4] [REPEATS=3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
STEPS="${1:-4}"
REPEATS="${2:-3}"
SPEC="$ROOT/experiments/bench/resnet50-96px.yaml"
PY="$EXPRUN_VENV/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
declare -A conf=(
  [fp32]=""
  [bf16]="--set train.precision=bf16"
  [checkpoint_layer3_4]="--set train.activation_checkpointing=[layer3,layer4]"
  [checkpoint_layer1_2]="--set train.activation_checkpointing=[layer1,layer2]"
  [checkpoint_all]="--set train.activation_checkpointing=[all]"
  [accumulate_4x16]="--set train.batch_size=16 --set train.accumulate=4"
  [channels_last]="--set train.channels_last=true"
)
order=(fp32 bf16 checkpoint_layer3_4 checkpoint_layer1_2 checkpoint_all accumulate_4x16 channels_last)
declare -A ips mem
for i in $(seq 1 "$REPEATS"); do
  for c in "${order[@]}"; do
    # shellcheck disable=SC2086
    "$EXPRUN_BIN" run "$SPEC" --out "$TMP/$c" --overwrite --set train.max_steps="$STEPS" --set train.eval=false \
      ${conf[$c]} >/dev/null 2>&1
    read -r a b < <("$PY" -c "import json,sys; e=json.load(open(sys.argv[1]))['epochs'][0]; print(e['time_s'] / e['steps'], e['peak_memory_bytes'])" "$TMP/$c/resnet50-96px.json")
    ips[$c]+="$a "
    mem[$c]+="$b "
  done
done
mkdir -p "$ROOT/bench/results"
args=()
for c in "${order[@]}"; do args+=("$c" "${ips[$c]}" "${mem[$c]}"); done
"$PY" - "$STEPS" "$ROOT/bench/results/memory.json" "${args[@]}" <<'PY'
import json, statistics, sys
steps, out, rest = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
res = {"model": "resnet50, synthetic 3x96x96", "batch": 64, "threads": 2, "steps": steps, "cpu": cpu, "configs": {}}
for k in range(0, len(rest), 3):
    name, st, mem = rest[k], list(map(float, rest[k + 1].split())), list(map(float, rest[k + 2].split()))
    res["configs"][name] = {"step_time_s": st, "peak_memory_bytes": mem,
                            "median_step_time_s": statistics.median(st), "median_peak_bytes": statistics.median(mem)}
base = res["configs"]["fp32"]
print(f"resnet50 3x96x96 synthetic, batch 64, 2 threads, {steps} steps, medians of {len(base['step_time_s'])}:")
for name, c in res["configs"].items():
    c["time_vs_fp32"] = c["median_step_time_s"] / base["median_step_time_s"]
    c["memory_vs_fp32"] = c["median_peak_bytes"] / base["median_peak_bytes"]
    print(f"  {name:20s} step {c['median_step_time_s']:6.2f} s ({c['time_vs_fp32']:.2f}x)  "
          f"peak {c['median_peak_bytes'] / 2**20:7.0f} MiB ({c['memory_vs_fp32']:.2f}x)")
json.dump(res, open(out, "w"), indent=2)
PY
