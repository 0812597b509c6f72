#!/usr/bin/env bash
# Purpose: what a run shows and records while it runs — the target stop (train.target_top1 with
# evaluations every few steps: the run stops at the first evaluation meeting it, the summary's
# time to target, step and epoch; stop_at_target: false records it and trains on; an unreachable
# target runs to the end with null); the per-step CSV and the TensorBoard event files read back
# with the `tensorboard` package's EventAccumulator and matched against the result file; a run
# killed mid-epoch and resumed continues both with every step once and the uninterrupted run's
# per-step losses; output.tensorboard/steps_csv: false; the progress bar (EXPRUN_PROGRESS=1:
# redrawn with \r, plain lines otherwise); `exprun peak` and its cache.
# Usage: live_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"
export EXPRUN_CACHE_DIR="$TMP/cache"

cat >"$TMP/live.yaml" <<YAML
name: live
seed: 5
model: {type: small_cnn, width: 8, hidden: 32}
data: {type: fashion_mnist, train_limit: 1280, test_limit: 500}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
scheduler: {type: cosine}
train: {epochs: 3, batch_size: 64, threads: 1, workers: 1, log_every: 0, eval_every_steps: 6}
output: {save_weights: true, checkpoint: {every_steps: 5, keep: 2}}
YAML
S="$TMP/live.yaml"

# --- a reachable target: stops at the first evaluation meeting it ------------------------------
"$EXPRUN" run "$S" --out "$TMP/t" --set train.target_top1=55 >/dev/null 2>"$TMP/t.err"
check "[[ $? == 0 ]]" "target run: $(tail -3 "$TMP/t.err")"
expect_grep "$TMP/t.err" "target reached at step" "target line"
msg=$("$PY" - "$TMP/t/live.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); s = r["summary"]; ev = r["evals"]
hit = [e for e in ev if e["val_top1"] >= 55]
if r["status"] != "completed": print("status", r["status"])
if not hit: print("no evaluation met the target", ev)
elif ev[-1] != hit[0]: print("evaluations after the target", ev)
else:
    h = hit[0]
    if (s["time_to_target_s"], s["target_step"], s["target_epoch"]) != (h["time_s"], h["step"], h["epoch"]): print("summary", s, h)
    if s["target"] != {"val_top1": 55.0}: print("target", s["target"])
    if h["step"] >= 60: print("did not stop early", h)
    if any(e["step"] % 6 and e["step"] % 20 for e in ev): print("evaluation steps", [e["step"] for e in ev])
    times = [e["time_s"] for e in ev]
    if times != sorted(times) or times[0] <= 0: print("evaluation times", times)
    last = r["epochs"][-1]
    if h["step"] % 20 and not last.get("partial"): print("the stopped epoch is not marked partial", last)
    if last["val_top1"] != h["val_top1"]: print("the last epoch's val_top1 is not the target evaluation's")
    for e in r["epochs"]:
        if not (0 < e["mfu"] < 1 and e["flops_per_s"] > 0): print("mfu", e["mfu"], e["flops_per_s"])
        if not (0 < e["peak_allocated_bytes"] < e["peak_memory_bytes"]): print("peak allocated", e["peak_allocated_bytes"])
    p = r["provenance"]
    if not (p["flops_per_image"] > 2.5 * p["forward_flops_per_image"] > 0 and p["peak_flops_per_s"] > 0): print("provenance", p)
PYEOF
)
check "[[ -z \"$msg\" ]]" "target summary: $msg"

# --- stop_at_target: false: the time recorded, the run goes on to its last epoch -----------------
"$EXPRUN" run "$S" --out "$TMP/on" --set train.target_top1=55 --set train.stop_at_target=false >/dev/null 2>"$TMP/on.err"
check "[[ $? == 0 ]]" "stop_at_target false: $(tail -3 "$TMP/on.err")"
msg=$("$PY" -c "
import json; a, b = (json.load(open(p)) for p in ('$TMP/t/live.json', '$TMP/on/live.json'))
s = b['summary']
print('' if s['time_to_target_s'] and s['target_step'] == a['summary']['target_step'] and s['epochs_completed'] == 3
      and b['evals'][-1]['step'] == 60 else (s, b['evals'][-1]))")
check "[[ -z \"$msg\" ]]" "stop_at_target false: $msg"

# --- an unreachable target: the whole run, time to target null; the report's column --------------
"$EXPRUN" run "$S" --out "$TMP/u" --set train.target_top1=99.9 --set train.epochs=1 >/dev/null 2>"$TMP/u.err"
check "[[ $? == 0 ]]" "unreachable target run: $(tail -3 "$TMP/u.err")"
msg=$("$PY" -c "
import json; s = json.load(open('$TMP/u/live.json'))['summary']
print('' if s['time_to_target_s'] is None and s['target_step'] is None and s['epochs_completed'] == 1 else s)")
check "[[ -z \"$msg\" ]]" "unreachable: $msg"
"$EXPRUN" report "$TMP/t/live.json" "$TMP/u/live.json" >"$TMP/report.md" 2>&1
expect_grep "$TMP/report.md" "Time to target" "report column"
expect_grep "$TMP/report.md" "not reached" "report: not reached"
"$EXPRUN" report --format html "$TMP/t/live.json" "$TMP/u/live.json" -o "$TMP/report.html" 2>/dev/null
expect_grep "$TMP/report.html" "Validation Top-1 against wall-clock time" "report chart"

# --- CSV and TensorBoard files against the result file ------------------------------------------
"$EXPRUN" run "$S" --out "$TMP/ref" >/dev/null 2>"$TMP/ref.err"
check "[[ $? == 0 ]]" "reference run: $(tail -3 "$TMP/ref.err")"
cat >"$TMP/read.py" <<'PYEOF'
import csv, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out, name = sys.argv[1], sys.argv[2]
r = json.load(open(f"{out}/{name}.json"))
rows = list(csv.DictReader(open(f"{out}/{name}.steps.csv")))
ea = EventAccumulator(f"{out}/tensorboard/{name}", size_guidance={"scalars": 0}); ea.Reload()
sc = lambda tag: [(e.step, e.value) for e in ea.Scalars(tag)]
problems = []
steps = [int(x["step"]) for x in rows]
total = r["provenance"]["total_steps"]
if steps != list(range(1, total + 1)): problems.append(f"csv steps {steps[:5]}..{steps[-5:]} (of {total})")
tb = sc("train/loss")
if [s for s, _ in tb] != steps: problems.append("tensorboard steps differ from the csv's")
for (s, v), x in zip(tb, rows):
    if abs(v - float(x["loss"])) > 1e-6 * max(1, abs(v)): problems.append(f"step {s}: loss {v} vs csv {x['loss']}"); break
# The epoch's training loss is the mean over its samples of the per-step losses (equal batches here).
per = r["provenance"]["steps_per_epoch"]
for e in r["epochs"]:
    mine = [float(x["loss"]) for x in rows if int(x["epoch"]) == e["epoch"]]
    if len(mine) != per or abs(sum(mine) / len(mine) - e["train_loss"]) > 1e-6: problems.append(f"epoch {e['epoch']} loss")
    lr = [float(x["lr"]) for x in rows if int(x["epoch"]) == e["epoch"]][-1]
    if abs(lr - e["lr"]) > 1e-9 * max(1, e["lr"]): problems.append(f"epoch {e['epoch']} lr {lr} vs {e['lr']}")
# TensorBoard's scalars are float32: equal to the result file's doubles within float32's precision
# (rounding both to a few decimals failed when a value sat on a rounding boundary).
def same(a, b): return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(a, b))
tb_top1, file_top1 = [v for _, v in sc("val/top1")], [e["val_top1"] for e in r["evals"]]
if not same(tb_top1, file_top1): problems.append(f"val/top1 {tb_top1} vs {file_top1}")
if [s for s, _ in sc("val/top1")] != [e["step"] for e in r["evals"]]: problems.append("val/top1 steps")
tb_mfu = [v for _, v in sc("epoch/mfu")]
file_mfu = [e["mfu"] for e in r["epochs"] if e["mfu"] is not None]  # above 100 %: null, and no TensorBoard point
if not same(tb_mfu, file_mfu): problems.append(f"epoch/mfu {tb_mfu} vs {file_mfu}")
for tag in ("train/lr", "train/images_per_s", "train/grad_norm", "epoch/images_per_s", "epoch/peak_memory_bytes"):
    if not sc(tag): problems.append("no " + tag)
print(json.dumps({"problems": problems, "loss": [float(x["loss"]) for x in rows]}))
PYEOF
"$PY" "$TMP/read.py" "$TMP/ref" live >"$TMP/ref.read" 2>"$TMP/ref.read.err"
msg=$("$PY" -c "import json; print('; '.join(json.load(open('$TMP/ref.read'))['problems']))" 2>&1)
check "[[ -z \"$msg\" ]]" "csv/tensorboard vs result file: $msg $(tail -3 "$TMP/ref.read.err")"

# --- killed mid-epoch and resumed: each step once, the uninterrupted run's losses -------------
EXPRUN_FAULT=step@13 "$EXPRUN" run "$S" --out "$TMP/k" >/dev/null 2>"$TMP/k.err"
check "[[ $? == 137 ]]" "killed at step 13"
"$EXPRUN" run "$S" --out "$TMP/k" --resume >/dev/null 2>"$TMP/kr.err"
check "[[ $? == 0 ]]" "resume: $(tail -3 "$TMP/kr.err")"
"$PY" "$TMP/read.py" "$TMP/k" live >"$TMP/k.read" 2>"$TMP/k.read.err"
msg=$("$PY" -c "
import json; a, b = (json.load(open(p)) for p in ('$TMP/ref.read', '$TMP/k.read'))
print('; '.join(b['problems']) or ('' if a['loss'] == b['loss'] else 'per-step losses differ from the uninterrupted run'))" 2>&1)
check "[[ -z \"$msg\" ]]" "resumed csv/tensorboard: $msg $(tail -3 "$TMP/k.read.err")"

# --- switched off --------------------------------------------------------------------------------
"$EXPRUN" run "$S" --out "$TMP/off" --set train.epochs=1 --set output.tensorboard=false --set output.steps_csv=false \
  --set output.checkpoint.every_steps=0 >/dev/null 2>&1
check "[[ -f $TMP/off/live.json && ! -e $TMP/off/live.steps.csv && ! -e $TMP/off/tensorboard ]]" "files switched off"

# --- progress bar ----------------------------------------------------------------------------------
EXPRUN_PROGRESS=1 "$EXPRUN" run "$S" --out "$TMP/bar" --set train.epochs=1 --set train.log_every=5 \
  --set output.checkpoint.every_steps=0 >/dev/null 2>"$TMP/bar.err"
check "[[ $? == 0 ]]" "bar run"
check "grep -q \$'\\r' $TMP/bar.err && grep -q 'epoch 1/1 \\[#' $TMP/bar.err" "bar drawn with carriage returns"
check "! grep -q 'step 5/20' $TMP/bar.err" "no progress lines under the bar"
EXPRUN_PROGRESS=0 "$EXPRUN" run "$S" --out "$TMP/plain" --set train.epochs=1 --set train.log_every=5 \
  --set output.checkpoint.every_steps=0 >/dev/null 2>"$TMP/plain.err"
check "! grep -q \$'\\r' $TMP/plain.err && grep -q 'step 5/20' $TMP/plain.err" "plain lines without a terminal"

# --- exprun peak -----------------------------------------------------------------------------------
rm -rf "$EXPRUN_CACHE_DIR"
expect_code 0 "peak" -- "$EXPRUN" peak --threads 1
expect_grep "$TMP/out" "measured GEMM peak: .* FLOP/s .*measured now" "peak measured"
expect_grep "$TMP/out" "rule (MFU's denominator): .* FLOP/s .*core(s) x .* FLOP/cycle" "the rule beside it"
# Cached only when two measurements agree and the machine is idle (under ctest -j2 it may not be):
# the file exists exactly when the output says so, and a cached figure is read back.
if grep -q "measured now, cached" "$TMP/out"; then
  check "[[ -f $EXPRUN_CACHE_DIR/peak_flops.json ]]" "peak cached"
  expect_code 0 "peak again" -- "$EXPRUN" peak --threads 1
  expect_grep "$TMP/out" "FLOP/s  (.*; cached;" "peak from the cache"
else
  expect_grep "$TMP/out" "not cached: the two measurements differed by more than 5 % or the machine was busy" "why not"
  check "[[ ! -f $EXPRUN_CACHE_DIR/peak_flops.json ]]" "no cache written"
fi
expect_code 2 "bad precision" -- "$EXPRUN" peak --precision fp8

finish live_test
