#!/usr/bin/env bash
# Purpose: time to 92 % test Top-1 on Fashion-MNIST, exprun against the same recipe in Python
# PyTorch on the same libtorch (bench/fast_python.py), eager and torch.compile, and exprun without
# small_cnn's fused kernel: runs alternate (exprun, exprun-unfused, eager, compile, exprun, ...),
# REPEATS of each, on an otherwise idle machine. Per run:
# the time to target each program measures from its own start (exprun: run start before set-up;
# Python: start of main() after `import torch`) and the wall clock of the whole process (launch
# to exit: interpreter or binary start-up, data loading, compilation, training, evaluations).
# Prints every run and the medians, writes bench/results/time_to_accuracy.json, and copies the
# median exprun run's result file to results/fashion-mnist/fast.json (and its steps CSV); for
# another spec of the same model (a successor of fast.yaml, e.g. fast-6ep.yaml), the files are
# named after the spec's name: bench/results/time_to_accuracy-NAME.json, results/fashion-mnist/NAME.json.
# Usage: bench/time_to_accuracy.sh [REPEATS=3] [SPEC=experiments/fashion-mnist/fast.yaml]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
REPEATS="${1:-3}"
PY="$EXPRUN_VENV/bin/python"
SPEC="${2:-$ROOT/experiments/fashion-mnist/fast.yaml}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# The Python side takes the recipe's numbers from the resolved spec, so the two cannot drift apart.
"$EXPRUN_BIN" validate "$SPEC" >"$TMP/resolved.yaml"
NAME=$(sed -n 's/^name: //p' "$TMP/resolved.yaml" | head -1)
SUFFIX=""
[[ $NAME == fast ]] || SUFFIX="-$NAME"
PYARGS=$("$PY" - "$TMP/resolved.yaml" <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read()
def get(section, key):
    m = re.search(rf"^{section}:\n(?:  .*\n)*?  {key}: (.*)$", text, re.M)
    return m.group(1).strip()
lr = float(get("optimizer", "lr")) * int(get("train", "batch_size")) / int(get("optimizer", "base_batch"))
args = ["--epochs", get("train", "epochs"), "--batch", get("train", "batch_size"), "--lr", repr(lr),
        "--pct-start", get("scheduler", "pct_start"), "--label-smoothing", get("train", "label_smoothing"),
        "--width", get("model", "width"), "--hidden", get("model", "hidden"),
        "--eval-every", get("train", "eval_every_steps"), "--eval-batch", get("train", "eval_batch_size"),
        "--target", get("train", "target_top1")]
if get("data", "hflip") == "true": args.append("--hflip")
if get("train", "channels_last") == "true": args.append("--channels-last")
print(" ".join(args))
PYEOF
)
echo "python recipe: $PYARGS" >&2
now() { echo "$EPOCHREALTIME"; }
runs=()
for i in $(seq 1 "$REPEATS"); do
  # exprun as the spec says, then with libtorch's batch norm, ReLU and max-pool modules instead of
  # small_cnn's fused kernel (model.fused: false): how much of the difference the kernel makes.
  for variant in exprun exprun-unfused; do
    dir="$TMP/$variant$i"
    extra=()
    [[ $variant == exprun-unfused ]] && extra=(--set model.fused=false)
    t=$(now)
    "$EXPRUN_BIN" run "$SPEC" --out "$dir" --overwrite "${extra[@]}" >"$dir.log" 2>&1
    wall=$(awk "BEGIN{print $(now) - $t}")
    ex=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); s=r['summary']; print(json.dumps({'program':'$variant','time_to_target_s':s['time_to_target_s'],'target_step':s['target_step'],'target_epoch':s['target_epoch'],'images_per_s':sum(e['images_per_s'] for e in r['epochs'] if not e.get('partial'))/max(1,sum(1 for e in r['epochs'] if not e.get('partial'))),'mfu':r['epochs'][0]['mfu'],'wall_s':$wall,'run':$i}))" "$dir/$NAME.json")
    echo "run $i $variant: $ex" >&2
    runs+=("$ex")
  done
  for mode in eager compile; do
    flag=""
    [[ $mode == compile ]] && flag="--compile"
    t=$(now)
    # shellcheck disable=SC2086
    out=$("$PY" "$ROOT/bench/fast_python.py" $PYARGS $flag --seed "$i" 2>"$TMP/py$mode$i.err" | tail -1 || true)
    wall=$(awk "BEGIN{print $(now) - $t}")
    [[ $out == "{"* ]] || out="{\"error\": $("$PY" -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()[-400:]))' "$TMP/py$mode$i.err"), \"time_to_target_s\": null, \"evals\": [], \"images_per_s\": null}"
    py=$("$PY" -c "import json,sys; r=json.loads(sys.argv[1]); r.pop('evals'); r['program']='python-$mode'; r['wall_s']=$wall; r['run']=$i; print(json.dumps(r))" "$out")
    echo "run $i python-$mode: $py" >&2
    runs+=("$py")
  done
done
mkdir -p "$ROOT/bench/results"
printf '%s\n' "${runs[@]}" >"$TMP/runs.jsonl"
"$PY" "$ROOT/bench/time_to_accuracy_summary.py" "$TMP/runs.jsonl" "$ROOT/bench/results/time_to_accuracy$SUFFIX.json" "${SPEC#"$ROOT"/}"
# The median exprun run's result file and steps CSV (by time to target).
mid=$("$PY" -c "
import json, sys
ex = sorted((json.loads(l) for l in open(sys.argv[1]) if '\"exprun\"' in l), key=lambda r: r['time_to_target_s'] or 1e9)
print(ex[len(ex) // 2]['run'])" "$TMP/runs.jsonl")
cp "$TMP/exprun$mid/$NAME.json" "$ROOT/results/fashion-mnist/$NAME.json"
cp "$TMP/exprun$mid/$NAME.steps.csv" "$ROOT/results/fashion-mnist/$NAME.steps.csv"
