#!/usr/bin/env bash
# Purpose: sweeps as Slurm job arrays on a real single-machine Slurm cluster (munged, slurmctld and
# slurmd from Debian's slurm-wlm, started here on loopback by tests/cli/slurmlib.sh and stopped
# whatever happens). `exprun sweep --slurm --dry-run` prints the job script; `--slurm` submits one
# array of three tasks with a 1-minute time limit (--signal=USR1@10):
#   task 0 needs about 160 s (a 1 s sleep per batch): Slurm's SIGUSR1 before each limit makes it
#     save, requeue itself and resume; it is requeued at least twice, its result file counts the
#     attempts and its final weights are byte-identical to an uninterrupted run's (task 1's);
#   task 1, the same training without the sleep, completes in its first attempt, unaffected;
#   task 2 is cancelled (scancel) after its first checkpoint: its result file says "cancelled" and
#     its checkpoint resumes (outside Slurm) to the same weights.
# `exprun sweep --status` shows the array; `exprun report DIR` gathers its result files. Slurm holds
# a requeued job for 121 s before it may start again (its credential lifetime); the test, as the
# cluster's administrator, lets each requeued task start at once (scontrol update StartTime=now).
# Needs root; elsewhere it says so and passes.
# Usage: slurm_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"
source "$(dirname "${BASH_SOURCE[0]}")/slurmlib.sh"

if [[ $(id -u) != 0 ]]; then
  echo "cli_slurm: skipped: needs root"
  exit 0
fi
cleanup() {
  slurm_stop
  rm -rf "$TMP"
}
trap cleanup EXIT
for prog in munged slurmctld slurmd sbatch squeue scontrol scancel; do
  if ! command -v "$prog" >/dev/null; then
    bad "$prog is not installed (scripts/setup.sh installs munge and slurm-wlm)"
    finish cli_slurm
  fi
done
start=$(date +%s)
if ! slurm_start "$TMP/cluster"; then
  bad "the Slurm cluster did not start: $(tail -5 "$TMP/cluster/log/slurmctld.log" 2>/dev/null)"
  finish cli_slurm
fi
echo "cli_slurm: cluster up after $(($(date +%s) - start)) s"

cat >"$TMP/slow.yaml" <<YAML
name: slow
seed: 0
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 2560, test_size: 64, pool_size: 64}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 2, batch_size: 32, threads: 1, workers: 0, eval: false, log_every: 0}
output: {dir: $TMP/unused, save_weights: true, tensorboard: false, checkpoint: {every_steps: 10}}
YAML
# delay: task 0 sleeps 1 s per batch (160 steps), task 1 not, task 2 as task 0 (then cancelled).
grid=(--grid "data.batch_delay_ms=1000,0,1001")
out="$TMP/sweep"
slurm=(--slurm --time 1 --signal-s 10 --sbatch-arg=--cpus-per-task=1)

# 1. The job script, printed and written, nothing submitted.
expect_code 0 "--dry-run" -- "$EXPRUN" sweep "$TMP/slow.yaml" "${grid[@]}" --out "$out" "${slurm[@]}" --dry-run
for want in "#SBATCH --array=0-2" "#SBATCH --signal=USR1@10" "#SBATCH --requeue" "#SBATCH --time=1" \
  "#SBATCH --cpus-per-task=1" "srun --kill-on-bad-exit=1"; do
  expect_grep "$TMP/out" "$want" "the job script has $want"
done
check "[[ -f $out/slow-sweep.sbatch && -f $out/slow-sweep.slurm/runs.txt ]]" "the job script and the specs are written"
check "[[ -z \$(squeue -h) ]]" "--dry-run submitted nothing: $(squeue -h)"
expect_code 2 "--wait without --slurm is refused" -- "$EXPRUN" sweep "$TMP/slow.yaml" "${grid[@]}" --out "$out" --wait
expect_grep "$TMP/err" "need --slurm" "the refusal names --slurm"

# 2. The array.
expect_code 0 "--slurm submits the array" -- "$EXPRUN" sweep "$TMP/slow.yaml" "${grid[@]}" --out "$out" "${slurm[@]}"
job=$(tail -1 "$TMP/out")
check "[[ \"$job\" =~ ^[0-9]+$ ]]" "sbatch's job id printed: '$job'"
submitted=$(date +%s)
r0="$out/slow__batch_delay_ms-1000" r1="$out/slow__batch_delay_ms-0" r2="$out/slow__batch_delay_ms-1001"

# Task 2: cancelled once it has a checkpoint.
cancelled=0
unlisted=0
deadline=$((submitted + 420))
while (($(date +%s) < deadline)); do
  if ((!cancelled)) && [[ -n $(ls "$r2.ckpt" 2>/dev/null | grep step-) ]]; then
    scancel "${job}_2"
    cancelled=1
  fi
  # The cluster's administrator: a requeued task may start at once (Slurm holds it 121 s).
  squeue -h -r -t PD -o "%i %r" | awk '$2 == "BeginTime" {print $1}' | while read -r id; do
    scontrol update JobId="$id" StartTime=now 2>/dev/null
  done
  # Done when Slurm lists none of the array's tasks. A requeued task is listed nowhere for a moment
  # between its attempt's end and its requeue (seen under load): the array is done once no task is
  # listed and task 0's result file says it ended (not "requeued", not "running"), or none has been
  # listed for 60 s (a shorter wait is too short with cli_twohosts beside it: a requeue can take
  # longer to show). A squeue that fails (slurmctld slow to answer under load) says nothing: an empty
  # answer while task 0 is running would end the wait early.
  if listing=$(squeue -h -j "$job" 2>/dev/null); then
    if [[ -z $listing ]]; then
      ((unlisted)) || unlisted=$(date +%s)
      case $(json "$r0.json" 'j["status"]' 2>/dev/null) in
        completed | interrupted | cancelled | failed) break ;;
      esac
      (($(date +%s) - unlisted >= 60)) && break
    else
      unlisted=0
    fi
  fi
  sleep 2
done
took=$(($(date +%s) - submitted))
check "[[ -z \$(squeue -h -j $job) ]]" "the array finished within 420 s: $(squeue -h -r -j "$job")"
expect_code 0 "sweep --status" -- "$EXPRUN" sweep --status "$out"
cat "$TMP/out"
expect_grep "$TMP/out" "Slurm array $job (slow-sweep, 3 tasks): finished" "--status names the array"

# Task 0: requeued at least twice, completed, every attempt but the last ended "requeued".
attempts=$(json "$r0.json" 'len(j["attempts"])')
echo "cli_slurm: task 0 finished after $took s in $attempts attempts: $(json "$r0.json" 'tuple(str(a["from_step"]) + "-" + str(a["to_step"]) + ":" + a["ended"] + ":" + str(round(a["seconds"])) + "s" for a in j["attempts"])')"
# Time lost per requeue: from an attempt's end (its start + its run clock) to the next one's start.
echo "cli_slurm: seconds between an attempt's end and the next one's start: $("$PY" -c '
import json, sys, datetime
a = json.load(open(sys.argv[1]))["attempts"]
t = lambda s: datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").timestamp()
print(*[round(t(b["started_at"]) - t(x["started_at"]) - x["seconds"]) for x, b in zip(a, a[1:])])' "$r0.json")"
check "[[ \$(json $r0.json 'j[\"status\"]') == completed ]]" "task 0 completed: $(json "$r0.json" 'j["status"]')"
check "(( attempts >= 3 ))" "task 0 was requeued at least twice ($attempts attempts)"
check "[[ \$(json $r0.json 'all(a[\"ended\"] == \"requeued\" for a in j[\"attempts\"][:-1]) and j[\"attempts\"][-1][\"to_step\"] == 160') == True ]]" \
  "task 0's attempts: requeued, then completed at step 160"
check "[[ \$(json $r0.json 'all(b[\"from_step\"] == a[\"to_step\"] for a, b in zip(j[\"attempts\"], j[\"attempts\"][1:]))') == True ]]" \
  "each attempt resumed where the last one saved (no step lost)"
check "[[ \$(json $r0.json 'len(set(a[\"slurm_job\"] for a in j[\"attempts\"])) == 1 and j[\"attempts\"][0][\"slurm_job\"] != \"\"') == True ]]" \
  "every attempt ran in the same array task's job"
grep -h "requeued: Slurm job" "$out"/slurm-*.out | head -2

# Task 1: one attempt, completed; task 0's weights are its, byte for byte.
check "[[ \$(json $r1.json 'j[\"status\"] + \" \" + str(len(j[\"attempts\"]))') == 'completed 1' ]]" \
  "task 1 completed in one attempt: $(json "$r1.json" 'j["status"] + " " + str(len(j["attempts"]))')"
same_bytes() {  # A.pt B.pt: every tensor equal, bit for bit
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, torch
def tensors(p):
    m = torch.jit.load(p)
    return {**dict(m.named_parameters()), **dict(m.named_buffers())}
a, b = (tensors(p) for p in sys.argv[1:])
same = set(a) == set(b) and all(a[k].dtype == b[k].dtype and a[k].detach().numpy().tobytes() == b[k].detach().numpy().tobytes() for k in a)
print("same" if same else "differ")
PYEOF
}
check "[[ \$(same_bytes $r0.weights.pt $r1.weights.pt) == same ]]" "task 0's weights after its requeues are byte-identical to task 1's uninterrupted run"

# Task 2: cancelled, with a checkpoint that resumes to the same weights.
check "(( cancelled ))" "task 2 reached a checkpoint and was cancelled"
check "[[ \$(json $r2.json 'j[\"status\"] + \" \" + j[\"attempts\"][-1][\"ended\"]') == 'cancelled cancelled' ]]" \
  "task 2's result file says cancelled: $(json "$r2.json" 'j["status"]')"
expect_code 0 "task 2 resumes from its checkpoint (outside Slurm, without the sleep)" -- "$EXPRUN" run \
  "$out/slow-sweep.slurm/slow__batch_delay_ms-1001.yaml" --out "$out" --resume auto --force --set data.batch_delay_ms=0
check "[[ \$(json $r2.json 'j[\"status\"] + \" \" + str(len(j[\"attempts\"]))') == 'completed 2' ]]" \
  "task 2 resumed and completed (2 attempts): $(json "$r2.json" 'j["status"] + " " + str(len(j["attempts"]))')"
check "[[ \$(same_bytes $r2.weights.pt $r1.weights.pt) == same ]]" "task 2's resumed weights are byte-identical to task 1's"

# 3. The report of the array's folder: its three runs.
expect_code 0 "exprun report DIR" -- "$EXPRUN" report "$out" --format csv
check "[[ \$(tail -n +2 \"$TMP/out\" | wc -l) == 3 ]]" "the report has the array's 3 runs: $(cat "$TMP/out")"

finish cli_slurm
