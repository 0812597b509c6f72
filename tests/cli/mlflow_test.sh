#!/usr/bin/env bash
# Purpose: output.mlflow against a real MLflow tracking server (pip's mlflow in the project's venv,
# `mlflow server` with an sqlite store and an artifact root under the test's folder, on 127.0.0.1
# and a free port, stopped whatever happens), read back with mlflow's own Python client:
#   - a 2-rank run appears once; its params are the resolved spec, its epoch metrics the result
#     file's, its tags the provenance, the result file its artifact;
#   - the server killed mid-run: the run completes with the same epochs as without MLflow and says
#     how many points were not sent;
#   - a run killed and resumed is one MLflow run, with every step once and every param and tag, also
#     those its killed attempt had not sent;
#   - a tracking URI that is not http(s), with credentials in it, or an empty experiment: exit 2.
# Usage: mlflow_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

MLFLOW="$(dirname "$PY")/mlflow"
server=""
stop_server() {
  [[ -n $server ]] && kill -9 -- "-$server" 2>/dev/null
  [[ -n $server ]] && wait "$server" 2>/dev/null
  server=""
}
cleanup() {
  stop_server
  rm -rf "$TMP"
}
trap cleanup EXIT
if [[ ! -x $MLFLOW ]]; then
  bad "mlflow is not installed in $(dirname "$PY") (scripts/setup.sh installs it)"
  finish cli_mlflow
fi
port=$(free_port)
URI="http://127.0.0.1:$port"
start_server() {  # in a process group of its own (its workers with it), on loopback only
  setsid "$MLFLOW" server --backend-store-uri "sqlite:///$TMP/mlflow.db" --artifacts-destination "$TMP/artifacts" \
    --host 127.0.0.1 --port "$port" --workers 1 >>"$TMP/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 240); do
    "$PY" -c "import urllib.request,sys; urllib.request.urlopen('$URI/health', timeout=1)" 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}
started=$(date +%s)
if ! start_server; then
  bad "mlflow server did not start within 120 s: $(tail -5 "$TMP/server.log")"
  finish cli_mlflow
fi
echo "cli_mlflow: mlflow server up after $(($(date +%s) - started)) s"

cat >"$TMP/tiny.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: tiny
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 1024, test_limit: 256}
train: {epochs: 2, batch_size: 32, threads: 1, workers: 0, log_every: 0}
output: {tensorboard: false, mlflow: {tracking_uri: "$URI", experiment: exprun-test}}
YAML
# readback EXPERIMENT RESULT.json: mlflow's client against the result file; prints "ok" or what differs.
readback() {
  "$PY" - "$URI" "$@" <<'PYEOF'
import json, sys
from mlflow.tracking import MlflowClient
uri, experiment, result = sys.argv[1:4]
c = MlflowClient(tracking_uri=uri)
j = json.load(open(result))
exp = c.get_experiment_by_name(experiment)
runs = c.search_runs([exp.experiment_id], filter_string=f"attributes.run_name = '{j['name']}'")
problems = []
if len(runs) != 1: problems.append(f"{len(runs)} runs named {j['name']}")
run = runs[0]
if run.info.run_id != j.get("mlflow_run_id"): problems.append("run id differs from the result file's")
def flat(d, p=""):
    for k, v in d.items():
        key = f"{p}.{k}" if p else k
        if isinstance(v, dict) and v: yield from flat(v, key)
        else: yield key, v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
params = dict(flat(j["spec"]))
if set(params) != set(run.data.params): problems.append(f"param keys differ: {sorted(set(params) ^ set(run.data.params))[:5]}")
for k, v in params.items():
    got = run.data.params.get(k)
    if got is None: continue
    try:
        same = json.loads(got) == json.loads(v)
    except Exception:
        same = got == v
    if not same: problems.append(f"param {k}: {got} != {v}")
for key, field in [("epoch/train_loss", "train_loss"), ("epoch/time_s", "time_s"), ("epoch/images_per_s", "images_per_s"),
                   ("epoch/epoch", "epoch")]:
    hist = sorted(c.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
    want = [e[field] for e in j["epochs"]]
    if [m.value for m in hist] != want: problems.append(f"{key}: {[m.value for m in hist]} != {want}")
hist = sorted(c.get_metric_history(run.info.run_id, "val/top1"), key=lambda m: m.step)
want = [(e["step"], e["val_top1"]) for e in j["evals"]]
if [(m.step, m.value) for m in hist] != want: problems.append(f"val/top1: {[(m.step, m.value) for m in hist]} != {want}")
steps = [m.step for m in c.get_metric_history(run.info.run_id, "train/loss")]
if sorted(steps) != list(range(1, max(steps) + 1)): problems.append(f"train/loss steps not each once: {len(steps)} points, max {max(steps)}")
if run.data.tags.get("exprun.world_size") != str(j["provenance"]["world_size"]): problems.append("tag exprun.world_size")
if run.info.status != ("FINISHED" if j["status"] == "completed" else "KILLED"): problems.append(f"status {run.info.status}")
arts = [a.path for a in c.list_artifacts(run.info.run_id)]
if f"{j['name']}.json" not in arts: problems.append(f"artifacts: {arts}")
print("ok" if not problems else "; ".join(problems))
PYEOF
}

# 1. A 2-rank run: once in MLflow, params = spec, epoch metrics = result file, every step once.
expect_code 0 "a 2-rank run with output.mlflow" -- "$EXPRUN" launch --nproc-per-node 2 "$TMP/tiny.yaml" --out "$TMP/two"
expect_grep "$TMP/err" "mlflow: [0-9]* points sent to $URI" "the run says what it sent"
check "[[ \$(readback exprun-test $TMP/two/tiny.json) == ok ]]" "MLflow holds the run as the result file does: $(readback exprun-test "$TMP/two/tiny.json")"
check "! grep -q '\[rank 1\].*mlflow: ' $TMP/err" "rank 0 alone talks to the server: $(grep 'mlflow: ' "$TMP/err" | head -5)"

# Sections 2 and 3 act "mid-run": on synthetic data whose every batch sleeps 10 ms, so that a run of
# 256 steps lasts at least 2.56 s on any CPU, and the run is frozen (SIGSTOP) at an observed point
# before anything is done to the server: the run cannot be past that point, however fast the machine.
cat >"$TMP/slow.yaml" <<YAML
name: slow
seed: 0
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 4096, test_size: 256, batch_delay_ms: 10}
optimizer: {type: sgd, lr: 0.1, base_batch: 32, momentum: 0.9}
train: {epochs: 2, batch_size: 32, threads: 1, workers: 0, log_every: 10}
output: {tensorboard: false, mlflow: {tracking_uri: "$URI", experiment: exprun-test}}
YAML
# freeze_at PID PATTERN FILE: waits (60 s at most) for PATTERN in FILE, then stops PID; 1 if it ended first.
freeze_at() {
  for _ in $(seq 1 1200); do
    kill -0 "$1" 2>/dev/null || return 1
    grep -q "$2" "$3" 2>/dev/null && { kill -STOP "$1"; return 0; }
    sleep 0.05
  done
  return 1
}

# 2. The server killed mid-run: the run completes, its epochs those of a run without MLflow, and it
#    says what was not sent. The server goes down while the run is frozen in its first epoch: the
#    points of every later step, and both epochs' ends, cannot reach it.
expect_code 0 "the reference without MLflow" -- "$EXPRUN" run "$TMP/slow.yaml" --out "$TMP/ref" --set 'output.mlflow.tracking_uri=""'
"$EXPRUN" run "$TMP/slow.yaml" --out "$TMP/down" --set name=down >"$TMP/down.out" 2>"$TMP/down.err" &
run=$!
if freeze_at $run "epoch 1/2 step 10/128" "$TMP/down.err"; then
  logged=$(grep -c "step [0-9]*/128 " "$TMP/down.err")
  check "[[ $logged -lt 12 ]]" "the run is frozen in its first epoch ($logged progress lines)"
  stop_server
  kill -CONT $run
else
  bad "the run ended before its step 10 was logged: $(tail -3 "$TMP/down.err")"
fi
wait $run
code=$?
check "[[ $code == 0 ]]" "the run whose server was killed completed (exit $code): $(tail -3 "$TMP/down.err")"
expect_grep "$TMP/down.err" "points, [0-9]* params and [0-9]* tags could not be sent" "it says what was not sent"
check "[[ \$(json $TMP/down/down.json 'tuple((e[\"train_loss\"], e[\"val_top1\"]) for e in j[\"epochs\"])') == \$(json $TMP/ref/slow.json 'tuple((e[\"train_loss\"], e[\"val_top1\"]) for e in j[\"epochs\"])') ]]" \
  "its epochs equal the run's without MLflow"
grep -h "mlflow:" "$TMP/down.err" | head -3

# 3. Killed and resumed: one MLflow run, every step once, every param and tag. The run is frozen
#    once its second checkpoint is written and MLflow has its run, then killed; the server is then
#    given the record it has when the kill lands after the run was created and before its params
#    arrived: its params and a tag are deleted from the store, the server being down. The resumed
#    run must send them again.
start_server || bad "the server did not start again"
ck=(--set output.checkpoint.every_steps=10 --set name=resumed --set data.train_size=8192)
"$EXPRUN" run "$TMP/slow.yaml" --out "$TMP/res" "${ck[@]}" >"$TMP/r1.out" 2>"$TMP/r1.err" &
run=$!
run_in_store() {  # 0 once the MLflow store has the run named "resumed"
  "$PY" -c "import sqlite3,sys; c=sqlite3.connect('file:$TMP/mlflow.db?mode=ro', uri=True, timeout=5); sys.exit(0 if c.execute(\"select 1 from runs where name='resumed'\").fetchone() else 1)" 2>/dev/null
}
frozen=0
for _ in $(seq 1 600); do
  kill -0 $run 2>/dev/null || break
  if [[ $(ls "$TMP/res/resumed.ckpt" 2>/dev/null | grep -c step-) -ge 2 ]] && run_in_store; then
    kill -STOP $run && frozen=1
    break
  fi
  sleep 0.1
done
last=$(ls "$TMP/res/resumed.ckpt" 2>/dev/null | grep step- | sort | tail -1)
check "[[ $frozen == 1 && \$((10#\${last#step-})) -lt 500 ]]" "the run is frozen mid-run (checkpoint $last of 512 steps): $(tail -3 "$TMP/r1.err")"
kill -9 $run
wait $run 2>/dev/null
stop_server  # nothing the killed attempt sent can land after this
lost=$("$PY" - "$TMP/mlflow.db" <<'PYEOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
(run,) = c.execute("select run_uuid from runs where name='resumed'").fetchone()
c.execute("delete from params where run_uuid=?", (run,))
c.execute("delete from tags where run_uuid=? and key='exprun.world_size'", (run,))
c.commit()
print(c.execute("select count(*) from params where run_uuid=?", (run,)).fetchone()[0])
PYEOF
)
check "[[ $lost == 0 ]]" "the server has the run without its params ($lost left)"
start_server || bad "the server did not start again"
expect_code 0 "the killed run resumes" -- "$EXPRUN" run "$TMP/slow.yaml" --out "$TMP/res" "${ck[@]}" --resume auto
nparams=$("$PY" -c "
import json, sys
def flat(d):
    for v in d.values():
        if isinstance(v, dict) and v: yield from flat(v)
        else: yield 1
print(sum(flat(json.load(open(sys.argv[1]))['spec'])))" "$TMP/res/resumed.json")
expect_grep "$TMP/err" "lacked $nparams params and [1-9][0-9]* tags: sent again" "the resumed run sends the $nparams params and the tag the server lacks"
check "[[ \$(readback exprun-test $TMP/res/resumed.json) == ok ]]" "the resumed run is one MLflow run, every step, param and tag once: $(readback exprun-test "$TMP/res/resumed.json")"

# 4. Bad input: exit 2 naming the key; no credentials in a URI.
expect_code 2 "a file: tracking URI" -- "$EXPRUN" run "$TMP/tiny.yaml" --out "$TMP/bad" --set output.mlflow.tracking_uri=ftp://x
expect_grep "$TMP/err" "output.mlflow.tracking_uri" "the key is named"
expect_code 2 "credentials in the URI" -- "$EXPRUN" run "$TMP/tiny.yaml" --out "$TMP/bad" --set "output.mlflow.tracking_uri=http://me:secret@127.0.0.1:$port"
check "! grep -q secret \"$TMP/err\"" "the password is not echoed: $(cat "$TMP/err")"
expect_code 2 "an empty experiment" -- "$EXPRUN" run "$TMP/tiny.yaml" --out "$TMP/bad" --set output.mlflow.experiment=
expect_grep "$TMP/err" "output.mlflow.experiment" "the key is named"

finish cli_mlflow
