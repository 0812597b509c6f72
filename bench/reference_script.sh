#!/usr/bin/env bash
# Purpose: exprun beside torchvision's own reference training script on the same ImageFolder tree
# and options (experiments/bench/reference-recipe.yaml says them, flag for flag): ResNet-18, 32 px
# crops, TrivialAugmentWide, Mixup 0.2 / CutMix 1.0, random erasing 0.1, label smoothing 0.1,
# model EMA, SGD 0.1 with a cosine schedule, batch 64, 3 epochs, 2 threads and 2 workers, on the CPU.
# Runs alternate (exprun, exprun in channels_last, reference, exprun, ...: RUNS of each); exprun's
# seeds are 0, 1, ... (the reference script sets none). "exprun" has the reference's options and
# memory format; "exprun-cl" adds train.channels_last (NHWC weights and inputs: the same arithmetic,
# oneDNN's faster layout on this CPU), which the reference script has no flag for. Prints and writes (bench/results/reference_script.json) the
# training time of every epoch, the final Top-1 (and the EMA's) and wall times, and the ratio of
# the medians of the epochs' times.
#
# The reference script is not part of exprun: give a checkout of pytorch/vision's
# references/classification (train.py, presets.py, transforms.py, utils.py, sampler.py; measured
# with upstream commit e2aff7e9, 2024-07-08, whose CutMix uses --cutmix-alpha).
# Usage: bench/reference_script.sh VISION_REFERENCES_DIR [TREE] [RUNS]
#   TREE: the Fashion-MNIST PNG tree (made by bench/make_fm_imagefolder.py when missing;
#   default /tmp/fm-folder)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REFS="$(cd "${1:?give the folder of the torchvision references/classification scripts}" && pwd)"
TREE="${2:-/tmp/fm-folder}"
RUNS="${3:-2}"
EXE="${EXPRUN_BIN:-$ROOT/build/exprun}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
[[ -d "$TREE/train" ]] || "$PY" "$ROOT/bench/make_fm_imagefolder.py" "$TREE"
SPEC="$ROOT/experiments/bench/reference-recipe.yaml"
lscpu | grep -m1 "Model name" >&2 || true

for ((i = 0; i < RUNS; i++)); do
  for variant in exprun exprun-cl; do
    start=$(date +%s.%N)
    cl=false
    [[ $variant == exprun-cl ]] && cl=true
    "$EXE" run "$SPEC" --set data.root="$TREE" --set seed=$i --set train.channels_last=$cl --set name=$variant-$i \
      --out "$OUT" --overwrite >"$OUT/$variant-$i.log" 2>&1 || { tail -20 "$OUT/$variant-$i.log" >&2; exit 1; }
    echo "$variant $i: $(echo "$(date +%s.%N) - $start" | bc) s wall" | tee -a "$OUT/walls.txt" >&2
  done
  start=$(date +%s.%N)
  (cd "$REFS" && "$PY" train.py --data-path "$TREE" --model resnet18 --device cpu --epochs 3 --batch-size 64 \
     --workers 2 --lr 0.1 --lr-scheduler cosineannealinglr --train-crop-size 32 --val-resize-size 32 \
     --val-crop-size 32 --auto-augment ta_wide --mixup-alpha 0.2 --cutmix-alpha 1.0 --random-erase 0.1 \
     --label-smoothing 0.1 --model-ema --print-freq 1000 --output-dir "$OUT/reference-$i") \
    >"$OUT/reference-$i.log" 2>&1 || { tail -20 "$OUT/reference-$i.log" >&2; exit 1; }
  echo "reference $i: $(echo "$(date +%s.%N) - $start" | bc) s wall" | tee -a "$OUT/walls.txt" >&2
  rm -rf "$OUT/reference-$i"
done

"$PY" - "$OUT" "$RUNS" "$ROOT/bench/results/reference_script.json" <<'PYEOF'
import json, pathlib, re, statistics, sys, platform
out, runs, dest = pathlib.Path(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
walls = {}
for line in (out / "walls.txt").read_text().splitlines():
    m = re.match(r"([\w-]+) (\d+): ([\d.]+) s wall", line)
    walls[(m[1], int(m[2]))] = float(m[3])
def hms(s):
    h, m, sec = (int(x) for x in s.split(":"))
    return 3600 * h + 60 * m + sec
rows = []
for i in range(runs):
  for variant in ("exprun", "exprun-cl"):
    r = json.loads((out / f"{variant}-{i}.json").read_text())
    rows.append({"system": variant, "run": i, "epoch_s": [e["time_s"] for e in r["epochs"]],
                 "top1_per_epoch": [e["val_top1"] for e in r["epochs"]],
                 "top1": r["epochs"][-1]["val_top1"], "top1_ema": r["epochs"][-1].get("val_top1_ema"),
                 "wall_s": walls[(variant, i)]})
  log = (out / f"reference-{i}.log").read_text()
  rows.append({"system": "reference", "run": i,
               "epoch_s": [hms(t) for t in re.findall(r"Epoch: \[\d+\] Total time: (\d+:\d+:\d+)", log)],
               "top1_per_epoch": [float(x) for x in re.findall(r"Test:  Acc@1 ([\d.]+)", log)],
               "top1": float(re.findall(r"Test:  Acc@1 ([\d.]+)", log)[-1]),
               "top1_ema": float(re.findall(r"Test: EMA Acc@1 ([\d.]+)", log)[-1]),
               "wall_s": walls[("reference", i)]})
systems = ("exprun", "exprun-cl", "reference")
med = {s: statistics.median([t for r in rows if r["system"] == s for t in r["epoch_s"]]) for s in systems}
wall = {s: statistics.median([r["wall_s"] for r in rows if r["system"] == s]) for s in systems}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
summary = {"cpu": cpu, "runs": rows, "median_epoch_s": med, "median_wall_s": wall,
           "epoch_speedup": {s: med["reference"] / med[s] for s in systems[:2]},
           "wall_speedup": {s: wall["reference"] / wall[s] for s in systems[:2]}}
dest.write_text(json.dumps(summary, indent=1) + "\n")
for r in rows:
    print(f"{r['system']:10} run {r['run']}: epochs {', '.join(f'{t:.1f}' for t in r['epoch_s'])} s; "
          f"Top-1 by epoch {', '.join(f'{t:.2f}' for t in r['top1_per_epoch'])} % (EMA {r['top1_ema']:.2f} %); "
          f"wall {r['wall_s']:.0f} s")
for s in systems[:2]:
    print(f"median epoch: {s} {med[s]:.1f} s, reference {med['reference']:.1f} s: {summary['epoch_speedup'][s]:.2f}x; "
          f"wall {summary['wall_speedup'][s]:.2f}x ({cpu})")
PYEOF
