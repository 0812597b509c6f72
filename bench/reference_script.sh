#!/usr/bin/env bash
# Purpose: exprun beside torchvision's own reference training script on the same ImageFolder tree
# and options, recipe by recipe, with enough runs to tell a difference of Top-1 from the runs' spread.
# experiments/bench/reference-recipe.yaml is the methods recipe, flag for flag: ResNet-18, 32 px
# crops, TrivialAugmentWide, Mixup 0.2 / CutMix 1.0, random erasing 0.1, label smoothing 0.1, model
# EMA, SGD 0.1 with a cosine schedule, batch 64, 3 epochs, 2 threads and 2 workers, on the CPU.
#
# A recipe is "methods" (all five methods), "plain" (none of them: RandomResizedCrop and flip only),
# "plain+M" (plain and one method) or "methods-M" (all but one), M one of
#   ta     TrivialAugmentWide            (--auto-augment ta_wide      | data.auto_augment: ta_wide)
#   mix    Mixup 0.2 / CutMix 1.0        (--mixup-alpha, --cutmix-alpha | methods: [mixup])
#   erase  random erasing 0.1            (--random-erase 0.1          | data.random_erasing: 0.1)
#   ls     label smoothing 0.1           (--label-smoothing 0.1       | train.label_smoothing: 0.1)
#   ema    model EMA every 32 steps      (--model-ema                 | train.ema_decay, ema_every)
# RECIPES (environment; default "methods plain") lists the recipes; each runs RUNS times on each
# side with seeds 0..RUNS-1: exprun's `seed`, and for the script (which has no seed flag) a wrapper
# that seeds torch's and Python's generators and then runs train.py unchanged (runpy). The sides
# alternate, and which goes first alternates from run to run, so that the machine's drift falls on
# both. EXPRUN_SETS (environment) adds --set overrides to every exprun run (e.g.
# "scheduler.step_per=epoch", torchvision's once-an-epoch cosine).
#
# Prints and writes (RESULT, default bench/results/reference_script.json) per recipe and side: the
# final Top-1 of every run (raw weights; the EMA's apart, as the script's own evaluation prints it),
# mean, standard deviation, range, Welch's two-sided t-test of the difference of the means (and
# Mann-Whitney's U as a check that does not assume normality), and the medians of the epochs'
# training times with their ratio.
#
# The reference script is not part of exprun: give a checkout of pytorch/vision's
# references/classification (train.py, presets.py, transforms.py, utils.py, sampler.py).
# Usage: [RECIPES=...] [KEEP_DIR=DIR [FIRST=K] [SUMMARY_ONLY=1]] bench/reference_script.sh VISION_REFERENCES_DIR [TREE] [RUNS]
#   TREE: "first" (default): the first 12,000 training and 2,000 test images of Fashion-MNIST's
#   files, made into /tmp/fm-folder by bench/make_fm_imagefolder.py; "per-class": the first 1,200
#   and 200 of each class, folders c0..c9, made into /tmp/fm-per-class (--per-class); or the path
#   of a tree. RUNS: runs per recipe and side (default 5). The result file names the tree.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REFS="$(cd "${1:?give the folder of the torchvision references/classification scripts}" && pwd)"
TREE="${2:-first}"
RUNS="${3:-5}"
RECIPES="${RECIPES:-methods plain}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
case "$TREE" in
  first) TREE=/tmp/fm-folder TREE_ARGS=(--train 12000 --val 2000) TREE_NAME=first ;;
  per-class) TREE=/tmp/fm-per-class TREE_ARGS=(--train 12000 --val 2000 --per-class) TREE_NAME=per-class ;;
  *) TREE_ARGS=(--train 12000 --val 2000) TREE_NAME=$(basename "$TREE") ;;
esac
RESULT="${RESULT:-$ROOT/bench/results/reference_script-$TREE_NAME.json}"
EXE="${EXPRUN_BIN:-$ROOT/build/exprun}"
OUT="${KEEP_DIR:-$(mktemp -d)}"
mkdir -p "$OUT"
[[ -n "${KEEP_DIR:-}" ]] || trap 'rm -rf "$OUT"' EXIT
[[ -f "$REFS/train.py" ]] || { echo "reference_script.sh: no train.py in $REFS" >&2; exit 2; }
[[ -x "$EXE" ]] || { echo "reference_script.sh: no exprun binary at $EXE (build it, or set EXPRUN_BIN)" >&2; exit 2; }
[[ -d "$TREE/train" ]] || "$PY" "$ROOT/bench/make_fm_imagefolder.py" "$TREE" "${TREE_ARGS[@]}"
SPEC="$ROOT/experiments/bench/reference-recipe.yaml"
read -r -a extra_sets <<<"${EXPRUN_SETS:-}"

# The methods a recipe has, one per line.
methods_of() {
  local all="ta mix erase ls ema" r="$1"
  case "$r" in
    methods) tr ' ' '\n' <<<"$all" ;;
    plain) ;;
    plain+*) tr '+' '\n' <<<"${r#plain+}" ;;
    methods-*) tr ' ' '\n' <<<"$all" | grep -vxF -f <(tr '-' '\n' <<<"${r#methods-}") ;;
    *) echo "reference_script.sh: unknown recipe '$r' (methods, plain, plain+M, methods-M; M: $all)" >&2; return 2 ;;
  esac
}
has() { grep -qxF "$2" <<<"$1"; }

run_exprun() {  # recipe seed
  local m sets=()
  m="$(methods_of "$1")"
  has "$m" ta || sets+=(--set data.auto_augment=none)
  has "$m" mix || sets+=(--set 'methods=[]')
  has "$m" erase || sets+=(--set data.random_erasing=0)
  has "$m" ls || sets+=(--set train.label_smoothing=0)
  has "$m" ema || sets+=(--set train.ema_decay=0)
  for s in "${extra_sets[@]}"; do sets+=(--set "$s"); done
  local start name="exprun-${1//+/_}-$2"  # a run's name takes no '+'
  start=$(date +%s.%N)
  "$EXE" run "$SPEC" --set data.root="$TREE" --set seed="$2" --set name="$name" "${sets[@]}" \
    --out "$OUT" --overwrite >"$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log" >&2; exit 1; }
  echo "exprun $1 $2: $(echo "$(date +%s.%N) - $start" | bc) s wall" | tee -a "$OUT/walls.txt" >&2
}

run_reference() {  # recipe run
  local m flags=()
  m="$(methods_of "$1")"
  has "$m" ta && flags+=(--auto-augment ta_wide)
  has "$m" mix && flags+=(--mixup-alpha 0.2 --cutmix-alpha 1.0)
  has "$m" erase && flags+=(--random-erase 0.1)
  has "$m" ls && flags+=(--label-smoothing 0.1)
  has "$m" ema && flags+=(--model-ema)
  local start
  start=$(date +%s.%N)
  (cd "$REFS" && "$PY" -c "import random, runpy, sys, torch; s = int(sys.argv[1]); torch.manual_seed(s); random.seed(s)
sys.argv = ['train.py'] + sys.argv[2:]; runpy.run_path('train.py', run_name='__main__')" "$2" \
     --data-path "$TREE" --model resnet18 --device cpu --epochs 3 --batch-size 64 \
     --workers 2 --lr 0.1 --lr-scheduler cosineannealinglr --train-crop-size 32 --val-resize-size 36 \
     --val-crop-size 32 "${flags[@]}" --print-freq 1000 --output-dir "$OUT/reference-$1-$2") \
    >"$OUT/reference-$1-$2.log" 2>&1 || { tail -20 "$OUT/reference-$1-$2.log" >&2; exit 1; }
  echo "reference $1 $2: $(echo "$(date +%s.%N) - $start" | bc) s wall" | tee -a "$OUT/walls.txt" >&2
  rm -rf "$OUT/reference-$1-$2"
}

for r in $RECIPES; do methods_of "$r" >/dev/null; done
lscpu | grep -m1 "Model name" >&2 || true
# SUMMARY_ONLY=1 with KEEP_DIR: summarise the runs a stopped bench left there (pairs complete so far).
# FIRST=K: runs K..K+RUNS-1 (more runs into a KEEP_DIR that has 0..K-1; the summary takes 0..K+RUNS-1).
FIRST="${FIRST:-0}"
[[ -n "${SUMMARY_ONLY:-}" ]] && RUNS_DONE=0 || RUNS_DONE=$RUNS
for ((i = FIRST; i < FIRST + RUNS_DONE; i++)); do
  for r in $RECIPES; do
    if ((i % 2 == 0)); then run_exprun "$r" "$i"; run_reference "$r" "$i"
    else run_reference "$r" "$i"; run_exprun "$r" "$i"; fi
  done
done

"$PY" - "$OUT" "$((FIRST + RUNS))" "$RESULT" "$RECIPES" "${EXPRUN_SETS:-}" "$TREE" <<'PYEOF'
import json, pathlib, re, statistics, sys, platform
from scipy import stats
out, runs, dest, recipes, extra = pathlib.Path(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
walls = {}
for line in (out / "walls.txt").read_text().splitlines():
    m = re.match(r"(\w+) (\S+) (\d+): ([\d.]+) s wall", line)
    walls[(m[1], m[2], int(m[3]))] = float(m[4])
def hms(s):
    h, m, sec = (int(x) for x in s.split(":"))
    return 3600 * h + 60 * m + sec
rows = []
for r in recipes:
    for i in range(runs):
        if not (("exprun", r, i) in walls and ("reference", r, i) in walls): continue  # a pair not complete
        res = json.loads((out / f"exprun-{r.replace('+', '_')}-{i}.json").read_text())
        rows.append({"recipe": r, "system": "exprun", "run": i, "epoch_s": [e["time_s"] for e in res["epochs"]],
                     "top1_per_epoch": [e["val_top1"] for e in res["epochs"]],
                     "top1": res["epochs"][-1]["val_top1"], "top1_ema": res["epochs"][-1].get("val_top1_ema"),
                     "wall_s": walls[("exprun", r, i)]})
        log = (out / f"reference-{r}-{i}.log").read_text()
        acc = [float(x) for x in re.findall(r"Test:\s+Acc@1 ([\d.]+)", log)]
        ema = [float(x) for x in re.findall(r"Test: EMA\s+Acc@1 ([\d.]+)", log)]
        rows.append({"recipe": r, "system": "reference", "run": i,
                     "epoch_s": [hms(t) for t in re.findall(r"Epoch: \[\d+\] Total time: (\d+:\d+:\d+)", log)],
                     "top1_per_epoch": acc, "top1": acc[-1], "top1_ema": ema[-1] if ema else None,
                     "wall_s": walls[("reference", r, i)]})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
summary = {"cpu": cpu, "tree": sys.argv[6], "runs_per_side": {r: sum(1 for x in rows if x["recipe"] == r) // 2 for r in recipes}, "exprun_sets": extra, "recipes": {}, "runs": rows}
def describe(v):
    return {"mean": statistics.mean(v), "sd": statistics.stdev(v) if len(v) > 1 else 0.0, "min": min(v), "max": max(v)}
for r in recipes:
    side = {s: [x for x in rows if x["recipe"] == r and x["system"] == s] for s in ("exprun", "reference")}
    if len(side["exprun"]) < 2:
        print(f"{r}: {len(side['exprun'])} complete pair(s), too few for a test")
        continue
    top = {s: [x["top1"] for x in side[s]] for s in side}
    welch = stats.ttest_ind(top["exprun"], top["reference"], equal_var=False)
    mwu = stats.mannwhitneyu(top["exprun"], top["reference"], alternative="two-sided")
    med = {s: statistics.median([t for x in side[s] for t in x["epoch_s"]]) for s in side}
    rec = {s: describe(top[s]) for s in side}
    for s in side:
        e = [x["top1_ema"] for x in side[s] if x["top1_ema"] is not None]
        rec[s]["ema"] = describe(e) if e else None
        rec[s]["median_epoch_s"] = med[s]
    rec["difference"] = rec["exprun"]["mean"] - rec["reference"]["mean"]
    rec["welch_t"], rec["welch_p"] = float(welch.statistic), float(welch.pvalue)
    rec["mannwhitney_p"] = float(mwu.pvalue)
    rec["exprun_mean_within_reference_range"] = rec["reference"]["min"] <= rec["exprun"]["mean"] <= rec["reference"]["max"]
    rec["epoch_speedup"] = med["reference"] / med["exprun"]
    summary["recipes"][r] = rec
tmp = dest.with_suffix(".tmp")
tmp.write_text(json.dumps(summary, indent=1) + "\n")
tmp.replace(dest)
for x in rows:
    ema = f" (EMA {x['top1_ema']:.2f} %)" if x["top1_ema"] is not None else ""
    print(f"{x['recipe']:14} {x['system']:9} run {x['run']}: epochs {', '.join(f'{t:.1f}' for t in x['epoch_s'])} s; "
          f"Top-1 by epoch {', '.join(f'{t:.2f}' for t in x['top1_per_epoch'])} %{ema}; wall {x['wall_s']:.0f} s")
print(f"machine: {cpu}; tree: {sys.argv[6]}; runs a side: {summary['runs_per_side']}; exprun --set {extra or '(none)'}")
for r, rec in summary["recipes"].items():
    e, f = rec["exprun"], rec["reference"]
    print(f"{r:14} Top-1 exprun {e['mean']:.2f} ± {e['sd']:.2f} ({e['min']:.2f}-{e['max']:.2f}), reference "
          f"{f['mean']:.2f} ± {f['sd']:.2f} ({f['min']:.2f}-{f['max']:.2f}): difference {rec['difference']:+.2f}, "
          f"Welch p = {rec['welch_p']:.3f}, Mann-Whitney p = {rec['mannwhitney_p']:.3f}; epoch {e['median_epoch_s']:.1f} s "
          f"vs {f['median_epoch_s']:.1f} s: {rec['epoch_speedup']:.2f}x")
PYEOF
