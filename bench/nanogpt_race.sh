#!/usr/bin/env bash
# Purpose: exprun's baby GPT (experiments/text/baby.yaml) raced against nanoGPT's own train.py in its
# CPU "baby" configuration (its README's command), eager and with torch.compile, on the same
# character tokens (build/text/fortunes, made by scripts/setup.sh), same recipe, fp32, the same
# threads (each side's default: all cores). nanoGPT runs as published from a local copy (NANOGPT_DIR:
# a clone of karpathy/nanoGPT; nothing is fetched here): its data folder gets the tokens and a
# meta.pkl, and a wrapper offsets its fixed seed (1337) by the run's index, then runs train.py
# unchanged (runpy). exprun runs seeds 1337 + index. Sides alternate, and which goes first too.
#
# Prints and writes (RESULT, default bench/results/nanogpt_race.json): each run's final val loss
# (after STEPS steps: nanoGPT's estimate on 20 random batches, exprun's on 20 fixed ones of as many
# tokens) and median step time (steps 11..STEPS, the steps with an evaluation left out on both
# sides), the means, spreads, ratios and Welch's test of the val losses.
# Usage: NANOGPT_DIR=... bench/nanogpt_race.sh [RUNS] [STEPS]     (default 3 runs a side, 2000 steps)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS="${1:-3}"
STEPS="${2:-2000}"
NANO="${NANOGPT_DIR:?set NANOGPT_DIR to a local copy of karpathy/nanoGPT (git clone, as published)}"
EXE="${EXPRUN_BIN:-$ROOT/build/exprun}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
TEXT="${TEXT_DIR:-$ROOT/build/text/fortunes}"
RESULT="${RESULT:-$ROOT/bench/results/nanogpt_race.json}"
VARIANTS="${VARIANTS:-eager compile}"
OUT="${KEEP_DIR:-$(mktemp -d)}"
mkdir -p "$OUT"
[[ -n "${KEEP_DIR:-}" ]] || trap 'rm -rf "$OUT"' EXIT
[[ -f "$NANO/train.py" ]] || { echo "nanogpt_race.sh: no train.py in $NANO" >&2; exit 2; }
[[ -f "$TEXT/meta.json" ]] || { echo "nanogpt_race.sh: no tokens in $TEXT (run scripts/setup.sh)" >&2; exit 2; }
# nanoGPT reads data/<dataset>/ relative to its folder: a copy of it gets the tokens.
rm -rf "$OUT/nanogpt" && cp -r "$NANO" "$OUT/nanogpt" && rm -rf "$OUT/nanogpt/.git"
mkdir -p "$OUT/nanogpt/data/fortunes_char"
cp "$TEXT/train.bin" "$TEXT/val.bin" "$OUT/nanogpt/data/fortunes_char/"
"$PY" - "$TEXT/meta.json" "$OUT/nanogpt/data/fortunes_char/meta.pkl" <<'PYEOF'
import json, pickle, sys
m = json.load(open(sys.argv[1]))
itos = dict(enumerate(m["itos"]))
pickle.dump({"vocab_size": m["vocab_size"], "itos": itos, "stoi": {c: i for i, c in itos.items()}}, open(sys.argv[2], "wb"))
PYEOF

run_nanogpt() {  # variant index
  local compile=False
  [[ $1 == compile ]] && compile=True
  (cd "$OUT/nanogpt" && "$PY" -c "import runpy, sys, torch
offset = int(sys.argv[1]); seed = torch.manual_seed
torch.manual_seed = lambda s: seed(s + offset)  # train.py seeds 1337 once: 1337 + the run's index
sys.argv = ['train.py'] + sys.argv[2:]; runpy.run_path('train.py', run_name='__main__')" "$2" \
    config/train_shakespeare_char.py --device=cpu --compile=$compile --eval_iters=20 --log_interval=1 --block_size=64 \
    --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters="$STEPS" --lr_decay_iters="$STEPS" --dropout=0.0 \
    --dataset=fortunes_char --out_dir="$OUT/ckpt-$1-$2") >"$OUT/nanogpt-$1-$2.log" 2>&1 ||
    { tail -20 "$OUT/nanogpt-$1-$2.log" >&2; exit 1; }
  echo "nanogpt $1 $2 done" >&2
}
run_exprun() {  # index
  "$EXE" run "$ROOT/experiments/text/baby.yaml" --set data.dir="$TEXT" --set seed=$((1337 + $1)) \
    --set train.max_steps="$STEPS" --set name="exprun-$1" --out "$OUT" --overwrite >"$OUT/exprun-$1.log" 2>&1 ||
    { tail -20 "$OUT/exprun-$1.log" >&2; exit 1; }
  echo "exprun $1 done" >&2
}

lscpu | grep -m1 "Model name" >&2 || true
for ((i = 0; i < RUNS; i++)); do
  if ((i % 2 == 0)); then run_exprun "$i"; for v in $VARIANTS; do run_nanogpt "$v" "$i"; done
  else for v in $VARIANTS; do run_nanogpt "$v" "$i"; done; run_exprun "$i"; fi
done

"$PY" - "$OUT" "$RUNS" "$STEPS" "$RESULT" "$VARIANTS" <<'PYEOF'
import csv, json, pathlib, re, statistics, sys
from scipy import stats
out, runs, steps, dest, variants = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), pathlib.Path(sys.argv[4]), sys.argv[5].split()
evaluated = lambda s: s % 250 == 0 or s == steps  # both sides evaluate every 250 steps and at the end
rows = []
for i in range(runs):
    r = json.loads((out / f"exprun-{i}.json").read_text())
    t = {int(x["step"]): float(x["time_s"]) for x in csv.DictReader(open(out / f"exprun-{i}.steps.csv"))}
    dt = [(t[s] - t[s - 1]) * 1e3 for s in range(11, steps + 1) if s in t and s - 1 in t and not evaluated(s - 1)]
    rows.append({"side": "exprun", "run": i, "val_loss": r["evals"][-1]["val_loss"], "step_ms": statistics.median(dt),
                 "tokens_per_s": r["epochs"][-1].get("tokens_per_s")})
    for v in variants:
        log = (out / f"nanogpt-{v}-{i}.log").read_text()
        it = {int(a): float(b) for a, b in re.findall(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms", log)}
        dt = [it[s] for s in range(11, steps + 1) if s in it and not evaluated(s)]
        val = [float(b) for a, b in re.findall(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)", log) if int(a) == steps]
        rows.append({"side": f"nanogpt-{v}", "run": i, "val_loss": val[-1], "step_ms": statistics.median(dt)})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
summary = {"cpu": cpu, "runs_per_side": runs, "steps": steps, "sides": {}, "runs": rows}
ex = [x for x in rows if x["side"] == "exprun"]
for side in ["exprun"] + [f"nanogpt-{v}" for v in variants]:
    s = [x for x in rows if x["side"] == side]
    v = [x["val_loss"] for x in s]
    summary["sides"][side] = {"val_loss_mean": statistics.mean(v), "val_loss_sd": statistics.stdev(v) if len(v) > 1 else 0,
                              "val_loss_min": min(v), "val_loss_max": max(v),
                              "step_ms_median": statistics.median(x["step_ms"] for x in s)}
    if side != "exprun":
        rec = summary["sides"][side]
        rec["exprun_speedup"] = rec["step_ms_median"] / summary["sides"]["exprun"]["step_ms_median"]
        rec["exprun_val_loss_within_range"] = rec["val_loss_min"] <= summary["sides"]["exprun"]["val_loss_mean"] <= rec["val_loss_max"]
        if len(v) > 1:
            rec["welch_p_val_loss"] = float(stats.ttest_ind([x["val_loss"] for x in ex], v, equal_var=False).pvalue)
tmp = dest.with_suffix(".tmp")
tmp.write_text(json.dumps(summary, indent=1) + "\n")
tmp.replace(dest)
for x in rows:
    print(f"{x['side']:16} run {x['run']}: val loss {x['val_loss']:.4f}, median step {x['step_ms']:.2f} ms")
print(f"machine: {cpu}; {runs} runs a side, {steps} steps")
for side, rec in summary["sides"].items():
    extra = ""
    if side != "exprun":
        extra = (f"; exprun {rec['exprun_speedup']:.2f}x faster a step; exprun's mean val loss within this side's range: "
                 f"{rec['exprun_val_loss_within_range']}" + (f", Welch p = {rec['welch_p_val_loss']:.3f}" if "welch_p_val_loss" in rec else ""))
    print(f"{side:16} val loss {rec['val_loss_mean']:.4f} ± {rec['val_loss_sd']:.4f} ({rec['val_loss_min']:.4f}-{rec['val_loss_max']:.4f}), "
          f"step {rec['step_ms_median']:.2f} ms{extra}")
PYEOF
