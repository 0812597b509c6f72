#!/usr/bin/env bash
# Purpose: the small ViT of experiments/vit/vit-fashion-mnist.yaml against the same training in
# Python PyTorch eager (bench/vit_loop.py: torchvision's VisionTransformer, the same recipe), side
# by side on this machine with 2 intra-op threads: training images/s (median of runs) and the
# test Top-1 after EPOCHS epochs, SEEDS seeds a side (runs alternate, which side goes first
# alternating too). Prints every run and the summary; writes bench/results/vit_fashion_mnist.json.
# Usage: bench/vit_fashion_mnist.sh [EPOCHS=2] [SEEDS=3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
PY="$EXPRUN_VENV/bin/python"
EPOCHS="${1:-2}"
SEEDS="${2:-3}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
run_exprun() {
  "$EXPRUN_BIN" run "$ROOT/experiments/vit/vit-fashion-mnist.yaml" --out "$TMP" --overwrite --set seed="$1" \
    --set train.epochs="$EPOCHS" --set train.threads=2 --set train.log_every=0 >"$TMP/exprun-$1.log" 2>&1 ||
    { tail -20 "$TMP/exprun-$1.log" >&2; exit 1; }
  "$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); e = d['epochs']
print(json.dumps({'side': 'exprun', 'seed': int(sys.argv[2]), 'images_per_s': sum(x['images_per_s'] for x in e) / len(e), 'top1': e[-1]['val_top1']}))" \
    "$TMP/vit-fashion-mnist.json" "$1" | tee -a "$TMP/runs.jsonl"
}
run_python() {
  (cd "$ROOT/bench" && "$PY" vit_loop.py --epochs "$EPOCHS" --seed "$1" --threads 2) >"$TMP/python-$1.log" 2>&1 ||
    { tail -20 "$TMP/python-$1.log" >&2; exit 1; }
  "$PY" -c "import json, sys; d = json.loads(open(sys.argv[1]).read().splitlines()[-1]); d.update(side='python', seed=int(sys.argv[2])); print(json.dumps(d))" \
    "$TMP/python-$1.log" "$1" | tee -a "$TMP/runs.jsonl"
}
for ((s = 0; s < SEEDS; s++)); do
  if ((s % 2 == 0)); then run_exprun "$s"; run_python "$s"; else run_python "$s"; run_exprun "$s"; fi
done
"$PY" - "$TMP/runs.jsonl" "$ROOT/bench/results/vit_fashion_mnist.json" "$EPOCHS" <<'PYEOF'
import json, statistics, sys
from scipy import stats
runs = [json.loads(l) for l in open(sys.argv[1])]
side = {s: [r for r in runs if r["side"] == s] for s in ("exprun", "python")}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
out = {"cpu": cpu, "epochs": int(sys.argv[3]), "runs": runs}
for s, rs in side.items():
    top = [r["top1"] for r in rs]
    out[s] = {"median_images_per_s": statistics.median(r["images_per_s"] for r in rs), "top1_mean": statistics.mean(top),
              "top1_sd": statistics.stdev(top) if len(top) > 1 else 0.0, "top1_min": min(top), "top1_max": max(top)}
out["speedup"] = out["exprun"]["median_images_per_s"] / out["python"]["median_images_per_s"]
if len(runs) >= 4:
    out["welch_p"] = float(stats.ttest_ind([r["top1"] for r in side["exprun"]], [r["top1"] for r in side["python"]], equal_var=False).pvalue)
tmp = sys.argv[2] + ".tmp"
open(tmp, "w").write(json.dumps(out, indent=1) + "\n")
import os; os.replace(tmp, sys.argv[2])
e, p = out["exprun"], out["python"]
print(f"machine: {cpu}; {out['epochs']} epochs; images/s exprun {e['median_images_per_s']:.0f} vs Python eager "
      f"{p['median_images_per_s']:.0f}: {out['speedup']:.2f}x; Top-1 exprun {e['top1_mean']:.2f} ({e['top1_min']:.2f}-{e['top1_max']:.2f}) "
      f"vs {p['top1_mean']:.2f} ({p['top1_min']:.2f}-{p['top1_max']:.2f}), Welch p = {out.get('welch_p', float('nan')):.3f}")
PYEOF
