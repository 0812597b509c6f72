#!/usr/bin/env bash
# Purpose: data-parallel runs through the real launchers, and their failure modes:
# exprun launch (2 workers), torchrun --no-python, a two-"node" job on 127.0.0.1 (two launchers,
# world size 4), a killed worker (the launcher exits non-zero, naming the rank, within
# timeout_s + 30 s), spec mismatch between ranks, port in use, unreachable store, inconsistent
# RANK/WORLD_SIZE, NCCL without CUDA, and the listening sockets of a one-node launch (loopback only).
# Usage: ddp_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

cat >"$TMP/quick.yaml" <<YAML
name: quick
seed: 1
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: fashion_mnist, train_limit: 1024, test_limit: 256}
train: {epochs: 1, batch_size: 64, threads: 1, workers: 1, log_every: 0}
distributed: {timeout_s: 20}
YAML

# 1. exprun launch, output prefixed with the rank.
"$EXPRUN" launch --nproc-per-node 2 "$TMP/quick.yaml" --out "$TMP/l" >"$TMP/l.out" 2>"$TMP/l.err"
check "[[ $? == 0 ]]" "exprun launch exit code"
expect_grep "$TMP/l.err" "\[rank 0\] " "rank prefix on stderr"
expect_grep "$TMP/l.out" "\[rank 0\] epoch" "rank prefix on stdout"
check "[[ \$(json $TMP/l/quick.json 'j[\"provenance\"][\"world_size\"]') == 2 ]]" "world size 2"
check "[[ \$(json $TMP/l/quick.json 'len(j[\"epochs\"][0][\"peak_memory_bytes_per_rank\"])') == 2 ]]" "per-rank memory"

# 2. torchrun --no-python runs the same binary unchanged.
if [[ -x $TORCHRUN ]]; then
  "$TORCHRUN" --no-python --nproc-per-node 2 --master-port "$(free_port)" "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/t" \
    >"$TMP/t.out" 2>"$TMP/t.err"
  check "[[ $? == 0 ]]" "torchrun exit code: $(tail -5 "$TMP/t.err")"
  check "[[ \$(json $TMP/t/quick.json 'j[\"provenance\"][\"launcher\"]') == torchrun ]]" "torchrun launcher recorded"
  check "[[ \$(json $TMP/t/quick.json 'j[\"provenance\"][\"world_size\"]') == 2 ]]" "torchrun world size"
else
  bad "torchrun not found at $TORCHRUN"
fi

# 3. Two nodes on 127.0.0.1: two launchers, two workers each, world size 4.
port=$(free_port)
for node in 0 1; do
  "$EXPRUN" launch --nproc-per-node 2 --nnodes 2 --node-rank $node --master-addr 127.0.0.1 --master-port "$port" \
    "$TMP/quick.yaml" --out "$TMP/n" >"$TMP/n$node.out" 2>"$TMP/n$node.err" &
  pids+=($!)
done
wait "${pids[0]}"; c0=$?
wait "${pids[1]}"; c1=$?
check "[[ $c0 == 0 && $c1 == 0 ]]" "two-node launch exit codes $c0 $c1: $(tail -3 "$TMP/n1.err")"
check "[[ \$(json $TMP/n/quick.json 'j[\"provenance\"][\"world_size\"]') == 4 ]]" "two-node world size 4"
check "[[ \$(json $TMP/n/quick.json 'j[\"provenance\"][\"global_batch\"]') == 256 ]]" "two-node global batch"

# 4. A killed worker: the launcher stops the other and exits non-zero, naming the rank, in time.
"$EXPRUN" launch --nproc-per-node 2 "$TMP/quick.yaml" --out "$TMP/k" --set train.epochs=1000 --set train.eval=false \
  >"$TMP/k.out" 2>"$TMP/k.err" &
lpid=$!
pids+=($lpid)
for _ in $(seq 1 300); do grep -q "epoch 1/1000 step" "$TMP/k.err" 2>/dev/null && break; grep -q "img/s" "$TMP/k.err" && break; sleep 0.2; done
sleep 2
victim=$(pgrep -P "$lpid" | tail -1)
start=$(date +%s)  # timed from the kill: a slow start-up is not the launcher's reaction
kill -9 "$victim"
wait "$lpid"
code=$?
elapsed=$(($(date +%s) - start))
check "[[ $code != 0 ]]" "launcher exit code after a killed worker ($code)"
expect_grep "$TMP/k.err" "worker rank [01] (pid $victim) failed" "launcher names the failed rank"
check "[[ $elapsed -le 80 ]]" "launcher finished within timeout_s + 30 s (took ${elapsed}s)"
check "! pgrep -P $lpid >/dev/null" "no worker left running"

# 4b. Ctrl-C on the launcher: forwarded, every rank stops at the same step, exit 130, epochs kept.
"$EXPRUN" launch --nproc-per-node 2 "$TMP/quick.yaml" --out "$TMP/s" --set train.epochs=1000 --set train.eval=false \
  >"$TMP/s.out" 2>"$TMP/s.err" &
lpid=$!
pids+=($lpid)
for _ in $(seq 1 300); do [[ -s "$TMP/s/quick.json" ]] && break; sleep 0.2; done
kill -INT "$lpid"
wait "$lpid"
code=$?
check "[[ $code == 130 ]]" "launcher exit code after SIGINT ($code)"
check "[[ \$(json $TMP/s/quick.json 'j[\"status\"]') == interrupted ]]" "interrupted status after SIGINT"

# 4c. --max-restarts: a worker that fails once is restarted with the whole group.
cat >"$TMP/flaky.sh" <<SH
#!/usr/bin/env bash
# fails on the first attempt (rank 1 only), then runs exprun
if [[ \$TORCHELASTIC_RESTART_COUNT == 0 && \$RANK == 1 ]]; then exit 3; fi
exec "$EXPRUN" "\$@"
SH
chmod +x "$TMP/flaky.sh"
"$EXPRUN" launch --nproc-per-node 2 --max-restarts 1 --worker-exe "$TMP/flaky.sh" "$TMP/quick.yaml" --out "$TMP/r" \
  >"$TMP/r.out" 2>"$TMP/r.err"
check "[[ $? == 0 ]]" "a restarted group completes: $(tail -3 "$TMP/r.err")"
expect_grep "$TMP/r.err" "worker rank 1 (pid [0-9]*) failed with exit code 3" "the failure is reported"
expect_grep "$TMP/r.err" "restarting all workers (restart 1 of 1)" "the restart is reported"
"$EXPRUN" launch --nproc-per-node 2 --worker-exe "$TMP/flaky.sh" "$TMP/quick.yaml" --out "$TMP/r0" >/dev/null 2>"$TMP/r0.err"
check "[[ $? == 3 ]]" "without restarts the launcher exits with the worker's code"

# 5. The ranks resolved different specs: a clear error on every rank, exit 2.
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/m" \
    --set seed=$r >"$TMP/m$r.out" 2>"$TMP/m$r.err" &
  pids+=($!)
done
wait "${pids[-2]}"; m0=$?
wait "${pids[-1]}"; m1=$?
check "[[ $m0 == 2 && $m1 == 2 ]]" "spec mismatch exit codes $m0 $m1"
expect_grep "$TMP/m0.err" "resolved spec differs between ranks" "mismatch message on rank 0"
expect_grep "$TMP/m1.err" "resolved spec differs between ranks" "mismatch message on rank 1"

# 6. Port in use, unreachable store, inconsistent variables, NCCL without CUDA: exit 2, clear errors.
port=$(free_port)
"$PY" -c "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0); s.bind(('0.0.0.0', $port)); s.listen(); open('$TMP/held', 'w').close(); time.sleep(600)" &
holder=$!
pids+=($holder)
for _ in $(seq 1 600); do [[ -e $TMP/held ]] && break; sleep 0.1; done  # listening (not a fixed 1 s)
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/p" >/dev/null 2>"$TMP/p.err"
check "[[ $? == 2 ]]" "port in use: exit 2"
expect_grep "$TMP/p.err" "port in use" "port in use message"
kill "$holder" 2>/dev/null
port=$(free_port)
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/u" \
  --set distributed.timeout_s=3 >/dev/null 2>"$TMP/u.err"
check "[[ $? == 2 ]]" "unreachable store: exit 2"
expect_grep "$TMP/u.err" "cannot reach the store on 127.0.0.1:$port" "unreachable store message"
RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1234 "$EXPRUN" run "$TMP/quick.yaml" >/dev/null 2>"$TMP/i.err"
check "[[ $? == 2 ]]" "inconsistent RANK: exit 2"
expect_grep "$TMP/i.err" "RANK=2 is not below WORLD_SIZE=2" "inconsistent RANK message"
"$EXPRUN" run "$TMP/quick.yaml" --out "$TMP/c" --set distributed.backend=nccl >/dev/null 2>"$TMP/c.err"
check "[[ $? == 2 ]]" "nccl without CUDA: exit 2"
expect_grep "$TMP/c.err" "needs CUDA" "nccl without CUDA message"
"$EXPRUN" launch --nproc-per-node 0 "$TMP/quick.yaml" >/dev/null 2>"$TMP/z.err"
check "[[ $? == 2 ]]" "launch --nproc-per-node 0: exit 2"

# 10. One node: the store and Gloo listen on the loopback interface only, never on all interfaces.
port=$(free_port)
# (1000 epochs, 1M images: still running whenever the sampler looks, however fast the CPU; stopped below)
"$EXPRUN" launch --nproc-per-node 2 --master-port "$port" "$TMP/quick.yaml" --out "$TMP/ls" --set train.epochs=1000 \
  >/dev/null 2>"$TMP/ls.err" &
lpid=$!
pids+=("$lpid")
listening=""
for _ in $(seq 1 600); do  # until the store listens (at most 120 s)
  listening=$("$PY" - "$TMP/ls" <<'PY'
import os, sys
tag = sys.argv[1]
inodes = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if tag not in open(f"/proc/{pid}/cmdline").read():
            continue
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
def addr(hex_ip):
    if len(hex_ip) == 8:
        return ".".join(str(int(hex_ip[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return "::1" if hex_ip == "00000000000000000000000001000000" else ("::" if set(hex_ip) == {"0"} else hex_ip)
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN, one of the run's sockets
            ip, p = f[1].split(":")
            print(f"{addr(ip)}:{int(p, 16)}")
PY
)
  # the store and each rank's Gloo listener (Gloo connects its pairs after the store is up)
  grep -q ":$port$" <<<"$listening" && (($(grep -c . <<<"$listening") >= 3)) && break
  sleep 0.2
done
if grep -q ":$port$" <<<"$listening"; then ok; else bad "the store does not listen on port $port (listening: $listening)"; fi
if (($(grep -c . <<<"$listening") >= 3)); then ok; else bad "fewer than 3 listening sockets (store + 2 Gloo): $listening"; fi
nonloop=$(grep -v -E '^(127\.0\.0\.1|::1):' <<<"$listening")
if [[ -z $nonloop ]]; then ok; else bad "sockets of a one-node launch listen beyond loopback: $nonloop"; fi
kill "$lpid" 2>/dev/null
wait "$lpid" 2>/dev/null

finish cli_ddp
