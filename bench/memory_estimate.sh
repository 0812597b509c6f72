#!/usr/bin/env bash
# Purpose: how good `exprun plan --for cuda`'s memory curve is, on this machine's CPU (the tracking
# allocator): for ResNet-18 and ResNet-50 on synthetic 224² images (fp32, SGD with momentum, one
# process), the curve fitted from micro-batches 8, 16, 32 (doubled until linear) against a direct
# measurement of the same step at three larger micro-batches; and what recomputing ResNet-50's
# layer1 + layer2 (activation checkpointing) saves of the activation bytes at 96² (the bench spec
# experiments/bench/resnet50-96px.yaml), per image and at micro-batch 64. The allocations are
# deterministic: one run of each. Writes bench/results/memory_estimate.json and prints a table.
# Usage: bench/memory_estimate.sh   (about 10 minutes on 2 cores, up to ~9 GiB of memory)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
PY="$EXPRUN_VENV/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
IMAGENET="$ROOT/experiments/imagenet/resnet50-1gpu.yaml"
plan() {  # OUT SPEC BATCHES... [-- SETS...]
  local out="$1" spec="$2"
  shift 2
  "$EXPRUN_BIN" plan "$spec" --for cuda --device-memory 80GiB --global-batch 1024 --json "$out" "$@" >/dev/null
}
for model in resnet18 resnet50; do
  echo "== $model at 224²: fit from 8, 16, 32; direct at 48, 64, 96" >&2
  # (the ImageNet spec without its data: data.root points nowhere)
  plan "$TMP/$model-fit.json" "$IMAGENET" --set model.type=$model --set data.root="$TMP/no-data" --probe-batches 8 16 32
  plan "$TMP/$model-direct.json" "$IMAGENET" --set model.type=$model --set data.root="$TMP/no-data" --probe-batches 48 64 96
done
RECOMPUTE_SPEC="$ROOT/experiments/bench/resnet50-96px.yaml"
echo "== resnet50 at 96²: plain and layer1+layer2 recomputed, 16, 32, 64" >&2
plan "$TMP/r50-96-plain.json" "$RECOMPUTE_SPEC" --probe-batches 16 32 64
plan "$TMP/r50-96-recomputed.json" "$RECOMPUTE_SPEC" --probe-batches 16 32 64 \
  --set "train.activation_checkpointing=[layer1,layer2]"
"$PY" - "$TMP" "$ROOT/bench/results/memory_estimate.json" <<'PYEOF'
import json, sys, os, platform
tmp, out = sys.argv[1], sys.argv[2]
load = lambda n: json.load(open(os.path.join(tmp, n)))
MiB = 2**20
def estimate(fit, b):
    last = fit["measured"][-1]
    persistent = sum(last[k] for k in ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "ema_bytes", "comm_state_bytes"))
    act = max(fit["activations_floor_bytes"], fit["activations_fixed_bytes"] + fit["activations_per_sample_bytes"] * b)
    return persistent + act
result = {"cpu": platform.processor() or platform.machine(), "extrapolation": [], "recompute": {}}
print("| Model (224², fp32) | Fitted on | Micro-batch | Estimated (MiB) | Measured (MiB) | Error |")
print("|---|---|---:|---:|---:|---:|")
for model in ("resnet18", "resnet50"):
    fit, direct = load(f"{model}-fit.json"), load(f"{model}-direct.json")
    fitted = ", ".join(str(m["micro_batch"]) for m in fit["measured"])
    for m in direct["measured"]:
        b, measured = m["micro_batch"], m["peak_allocated_bytes"]
        est = estimate(fit, b)
        err = (est - measured) / measured
        result["extrapolation"].append({"model": model, "fitted_on": [m2["micro_batch"] for m2 in fit["measured"]],
                                        "micro_batch": b, "estimated_bytes": est, "measured_bytes": measured,
                                        "relative_error": err})
        print(f"| {model} | {fitted} | {b} | {est / MiB:.0f} | {measured / MiB:.0f} | {100 * err:+.1f} % |")
plain, rec = load("r50-96-plain.json"), load("r50-96-recomputed.json")
pa = {m["micro_batch"]: m["activations_bytes"] for m in plain["measured"]}
ra = {m["micro_batch"]: m["activations_bytes"] for m in rec["measured"]}
per_plain, per_rec = plain["activations_per_sample_bytes"], rec["activations_per_sample_bytes"]
result["recompute"] = {"spec": "experiments/bench/resnet50-96px.yaml", "stages": ["layer1", "layer2"],
                       "activations_bytes_plain": pa, "activations_bytes_recomputed": ra,
                       "per_image_bytes_plain": per_plain, "per_image_bytes_recomputed": per_rec}
print()
print("| ResNet-50, 96², fp32 | Activations at micro-batch 16 / 32 / 64 (MiB) | Per image (MiB) |")
print("|---|---:|---:|")
fmt = lambda d: " / ".join(f"{d[b] / MiB:.0f}" for b in sorted(d))
print(f"| plain | {fmt(pa)} | {per_plain / MiB:.2f} |")
print(f"| layer1 + layer2 recomputed | {fmt(ra)} | {per_rec / MiB:.2f} |")
cut = {b: 1 - ra[b] / pa[b] for b in pa if b in ra}
print(f"| cut | " + " / ".join(f"{100 * cut[b]:.0f} %" for b in sorted(cut)) + f" | {100 * (1 - per_rec / per_plain):.0f} % |")
result["recompute"]["cut_at_batch"] = cut
result["recompute"]["cut_per_image"] = 1 - per_rec / per_plain
os.makedirs(os.path.dirname(out), exist_ok=True)
json.dump(result, open(out + ".tmp", "w"), indent=2)
os.replace(out + ".tmp", out)
PYEOF
