#!/usr/bin/env bash
# Purpose: what output.mlflow costs a run, side by side in one run: the same training with MLflow
# on (a real `mlflow server` on 127.0.0.1, sqlite store, every step's metrics sent) and off,
# alternated, REPEATS rounds, on small_cnn (Fashion-MNIST, batch 64, ~4 ms steps: where a cost
# per step shows most). The server runs at nice 19: on a 2-core machine it would otherwise take its
# CPU from the run's two threads, which a server on another host does not (EXPRUN_MLFLOW_NICE=0
# measures that case). Medians of the epoch's images/s and their ratio are printed and written to
# bench/results/mlflow_overhead.json. The server is stopped whatever happens.
# Usage: [EXPRUN_MLFLOW_SPLIT=1] bench/mlflow_overhead.sh [REPEATS=5] [STEPS=400]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
REPEATS="${1:-5}"
STEPS="${2:-400}"
PY="$EXPRUN_VENV/bin/python"
TMP="$(mktemp -d)"
server=""
trap '[[ -n $server ]] && kill -9 -- "-$server" 2>/dev/null; rm -rf "$TMP"' EXIT
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
NICE="${EXPRUN_MLFLOW_NICE:-19}"
# EXPRUN_MLFLOW_SPLIT=1: the server on the last core, the runs on core 0 with 1 thread (taskset): the
# run's own cost of MLflow, with the server's CPU apart as on another host.
SPLIT="${EXPRUN_MLFLOW_SPLIT:-0}"
serverCpu=() runCpu=() threads=2
if [[ $SPLIT == 1 ]]; then
  serverCpu=(taskset -c "$(($(nproc) - 1))") runCpu=(taskset -c 0) threads=1
fi
setsid "${serverCpu[@]}" nice -n "$NICE" "$EXPRUN_VENV/bin/mlflow" server --backend-store-uri "sqlite:///$TMP/db" --artifacts-destination "$TMP/art" \
  --host 127.0.0.1 --port "$port" --workers 1 >"$TMP/server.log" 2>&1 &
server=$!
for _ in $(seq 1 240); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && break
  sleep 0.5
done
ips() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['epochs'][0]['images_per_s'])" "$1"; }
common=(--overwrite --set train.eval=false --set train.log_every=0 --set output.tensorboard=false
  --set train.max_steps="$STEPS" --set train.batch_size=64 --set train.threads="$threads")
on="" off=""
for i in $(seq 1 "$REPEATS"); do
  "${runCpu[@]}" "$EXPRUN_BIN" run "$ROOT/experiments/fashion-mnist/small-cnn.yaml" --out "$TMP/on" "${common[@]}" \
    --set output.mlflow.tracking_uri="http://127.0.0.1:$port" --set output.mlflow.experiment=bench >"$TMP/on.log" 2>&1
  on+="$(ips "$TMP"/on/*.json) "
  "${runCpu[@]}" "$EXPRUN_BIN" run "$ROOT/experiments/fashion-mnist/small-cnn.yaml" --out "$TMP/off" "${common[@]}" >/dev/null 2>&1
  off+="$(ips "$TMP"/off/*.json) "
  echo "  round $i: with MLflow $on/ without $off ($(grep -o 'mlflow: [0-9]* points sent' "$TMP/on.log"))" >&2
done
"$PY" - "$on" "$off" "$(lscpu | sed -n 's/^Model name: *//p')" "$ROOT/bench/results/mlflow_overhead$([[ $SPLIT == 1 ]] && echo -split).json" "$STEPS" "$NICE" "$SPLIT" <<'PY'
import json, statistics, sys
on, off = ([float(x) for x in a.split()] for a in sys.argv[1:3])
mon, moff = statistics.median(on), statistics.median(off)
r = {"cpu": sys.argv[3], "steps": int(sys.argv[5]), "batch": 64, "rounds": len(on), "server_nice": int(sys.argv[6]),
     "server_on_its_own_core": sys.argv[7] == "1",
     "with_mlflow": on, "without": off, "overhead": moff / mon - 1}
json.dump(r, open(sys.argv[4], "w"), indent=2)
print(f"{sys.argv[3]}: small_cnn b64, {sys.argv[5]} steps, images/s medians of {len(on)} alternated rounds: "
      f"with MLflow {mon:.0f}, without {moff:.0f} -> overhead {100 * (moff / mon - 1):+.2f} %")
PY
