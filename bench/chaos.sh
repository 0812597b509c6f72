#!/usr/bin/env bash
# Purpose: a chaos soak of restarts. A 2-rank `exprun launch --max-restarts N` run that
# checkpoints every 3 steps is hit N times by a controller that SIGKILLs a random worker at a
# random moment — the 2nd, 6th, 10th, ... right after a restart (as soon as the new workers are
# up), the 3rd, 6th, 9th, ... while a checkpoint is being staged. At the end the final weights must be byte-identical
# to an uninterrupted run's, the per-step CSV and the result file's epochs identical (times
# aside), and every kill accounted for (one restart each). Prints kills survived, steps
# recomputed (steps run beyond those kept), and the time lost against the uninterrupted run.
# Usage: bench/chaos.sh [N=20] [SEED=1] [EXPRUN_BINARY]   (the suite runs N=3: tests/cli/chaos_test.sh)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
N="${1:-20}" SEED="${2:-1}" EXE="${3:-$ROOT/build/exprun}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
OUT="$(mktemp -d)"
[[ -n ${KEEP:-} ]] && echo "files in $OUT"
launcher=0
trap '[[ $launcher != 0 ]] && { pkill -9 -P $launcher; kill -9 $launcher; } 2>/dev/null; [[ -n ${KEEP:-} ]] || rm -rf "$OUT"' EXIT
RANDOM=$SEED
EPOCHS=$((3 + 2 * N))
# CHAOS_DATA: the spec's data section in place of Fashion-MNIST's (the test's synthetic data with a
# sleep per batch, so that the run outlasts the kills however fast the CPU).
DATA="${CHAOS_DATA:-}"
[[ -n $DATA ]] || DATA='{train_limit: 4096, test_limit: 256}'
cat >"$OUT/chaos.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: chaos
model: {type: small_cnn, width: 8, hidden: 16}
data: $DATA
train: {epochs: $EPOCHS, batch_size: 32, threads: 1, workers: 0, log_every: 0}
output: {save_weights: true, tensorboard: false, checkpoint: {every_steps: 3, keep: 2}}
YAML
now() { date +%s.%N; }
t0=$(now)
"$EXE" launch --nproc-per-node 2 "$OUT/chaos.yaml" --out "$OUT/ref" >"$OUT/ref.log" 2>&1 || { tail "$OUT/ref.log"; exit 1; }
t_ref=$("$PY" -c "print($(now) - $t0)")

workers() { pgrep -P "$launcher" -f " run " 2>/dev/null; }
attempts() { grep -c "launch: attempt" "$OUT/chaos.log"; }
alive() {  # the launcher runs (not a zombie waiting for us)
  local s
  s=$(ps -o stat= -p "$launcher" 2>/dev/null)
  [[ -n $s && $s != Z* ]]
}
t0=$(now)
"$EXE" launch --nproc-per-node 2 --max-restarts "$N" --grace-s 2 "$OUT/chaos.yaml" --out "$OUT/chaos" \
  --set train.log_every=1 >"$OUT/chaos.log" 2>&1 &
launcher=$!
kills=0 during_save=0 after_restart=0
while ((kills < N)) && alive; do
  # Wait until both workers of the current attempt are up.
  for _ in $(seq 1 200); do [[ $(workers | wc -l) == 2 ]] || ! alive && break; sleep 0.02; done
  mapfile -t pids < <(workers)
  ((${#pids[@]} == 2)) || continue
  if ((kills % 4 == 1)); then
    sleep 0.$((RANDOM % 3))  # right after the restart
    after_restart=$((after_restart + 1))
  elif ((kills % 3 == 2)); then
    for _ in $(seq 1 400); do compgen -G "$OUT/chaos/chaos.ckpt/.staging-*" >/dev/null && break; sleep 0.005; done
    during_save=$((during_save + 1))
  else
    sleep "$((RANDOM % 2)).$((RANDOM % 10))"
  fi
  victim=${pids[$((RANDOM % 2))]}
  kill -9 "$victim" 2>/dev/null && kills=$((kills + 1))
  # Wait for the launcher to notice and start the next attempt (or end).
  # Wait for the launcher to start the next attempt (or to end).
  for _ in $(seq 1 600); do (($(attempts) > kills)) || ! alive && break; sleep 0.05; done
done
wait "$launcher"
code=$?
t_chaos=$("$PY" -c "print($(now) - $t0)")
launcher=0

fail=0
report() { echo "$*"; }
[[ -n ${KEEP:-} ]] && echo "logs: $OUT/chaos.log"
[[ $code == 0 ]] || { report "FAIL: the chaos run exited $code: $(tail -3 "$OUT/chaos.log")"; fail=1; }
cmp -s "$OUT/ref/chaos.weights.pt" "$OUT/chaos/chaos.weights.pt" || { report "FAIL: final weights differ"; fail=1; }
# step, epoch, loss, lr, grad_norm, loss_scale (the others are times)
cmp -s <(cut -d, -f1-4,6,7 "$OUT/ref/chaos.steps.csv") <(cut -d, -f1-4,6,7 "$OUT/chaos/chaos.steps.csv") ||
  { report "FAIL: per-step CSV differs"; fail=1; }
"$PY" - "$OUT/ref/chaos.json" "$OUT/chaos/chaos.json" <<'PYEOF' || fail=1
import json, sys
keep = ("epoch", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "lr", "grad_norm", "samples", "steps")
a, b = ([{k: e[k] for k in keep} for e in json.load(open(p))["epochs"]] for p in sys.argv[1:])
if a != b:
    print("FAIL: the result files' epochs differ"); sys.exit(1)
PYEOF
restarts=$(grep -c "restarting" "$OUT/chaos.log")
((restarts == kills)) || { report "FAIL: $kills kills but $restarts restarts in the launcher's log"; fail=1; }
# Steps recomputed: in each attempt that trained, but the last, the highest step logged minus the
# step the next attempt that trained resumed from.
"$PY" - "$OUT/chaos.log" "$kills" "$during_save" "$after_restart" "$restarts" "$t_chaos" "$t_ref" "$fail" <<'PYEOF'
import re, sys
log, kills, save, after, restarts, t_chaos, t_ref, fail = sys.argv[1:]
attempts, cur = [], None
for line in open(log, errors="replace"):
    if "launch: attempt" in line:
        cur = {"max": 0, "resumed": 0}
        attempts.append(cur)
    elif cur is not None:
        m = re.search(r"\] epoch (\d+)/\d+ step (\d+)/(\d+) ", line)
        if m:
            cur["max"] = max(cur["max"], (int(m[1]) - 1) * int(m[3]) + int(m[2]))
        m = re.search(r"resumed from .*step-0*(\d+):", line)
        if m:
            cur["resumed"] = int(m[1])
# Attempts killed before their first step trained nothing (and resumed from nothing).
trained = [a for a in attempts if a["max"] > 0]
recomputed = sum(max(0, a["max"] - b["resumed"]) for a, b in zip(trained, trained[1:]))
print(f"chaos: {kills} kills survived ({save} while a checkpoint was staged, {after} right after a restart), "
      f"{restarts} restarts, {len(attempts) - len(trained)} of them killed before their first step; resumed at steps "
      f"{[a['resumed'] for a in trained[1:]]}; {recomputed} steps recomputed; "
      f"{float(t_chaos):.1f} s against {float(t_ref):.1f} s uninterrupted ({float(t_chaos) - float(t_ref):.1f} s lost); "
      f"final weights, per-step CSV and epochs {'identical' if fail == '0' else 'NOT identical'}")
PYEOF
exit $fail
