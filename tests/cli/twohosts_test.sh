#!/usr/bin/env bash
# Purpose: two real hosts — two network namespaces joined by a veth pair with addresses of their
# own (10.233.0.1 and 10.233.0.2; nothing else is contacted) — run `exprun launch --nnodes 2`,
# one worker each, without GLOO_SOCKET_IFNAME: the run equals a single-node 2-rank run (per-step
# losses and final weights), every socket either node listens on is on its veth address (sampled
# with ss while the run lasts), each rank binds Gloo to its veth address (chosen from the route to the
# master, recorded in provenance); a peer that never arrives ends the other within timeout_s + 30 s
# naming it, and so does a peer that dies during the rendezvous; with 20 ms of netem delay on the
# link (a 10 Mbit/s token bucket where the kernel has no netem) the run completes and waits longer for the
# gradient exchange; node 1 killed mid-run ends node 0 within timeout_s + 30 s, and node 0 alone
# resumes the run (world size 2 -> 1) to its end; node 1's link taken down mid-run (a pulled cable)
# ends both with exit code 3 and a message naming the collective, the step, the rank that did not
# answer and the checkpoint to resume from. The namespaces are removed whatever happens.
# Needs root and `ip netns`; elsewhere it says so and passes.
# Usage: twohosts_test.sh EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

A="exprun-a-$$" B="exprun-b-$$" VA="exa$$" VB="exb$$"
if [[ $(id -u) != 0 ]] || ! ip netns add "$A" 2>/dev/null; then
  echo "cli_twohosts: skipped: needs root and ip netns"
  exit 0
fi
cleanup() {
  for ns in "$A" "$B"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
ip -n "$A" addr add 10.233.0.1/24 dev "$VA"
ip -n "$B" addr add 10.233.0.2/24 dev "$VB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up

cat >"$TMP/tiny.yaml" <<YAML
base: $ROOT/experiments/fashion-mnist/base.yaml
name: tiny
model: {type: small_cnn, width: 8, hidden: 16}
data: {train_limit: 1024, test_limit: 256}
train: {epochs: 1, batch_size: 32, threads: 1, workers: 0, max_steps: 12, eval: false, log_every: 0}
output: {save_weights: true, tensorboard: false}
distributed: {timeout_s: 10}
YAML
# host NS OUT NODE-RANK [run options]: one node of a 2-node launch inside namespace NS.
host() {
  local ns="$1" out="$2" node="$3"
  shift 3
  ip netns exec "$ns" env -u GLOO_SOCKET_IFNAME "$EXPRUN" launch --nnodes 2 --node-rank "$node" \
    --master-addr 10.233.0.1 --master-port 29511 --grace-s 2 "$TMP/tiny.yaml" --out "$out" --overwrite "$@"
}
# both OUT [run options]: node 0 in A (into OUT) and node 1 in B at once, output in TMP/a.* and
# TMP/b.*; sets ca and cb to their exit codes.
both() {
  local out="$1"
  shift
  host "$A" "$out" 0 "$@" >"$TMP/a.out" 2>"$TMP/a.err" &
  local pa=$!
  host "$B" "$out-b" 1 "$@" >"$TMP/b.out" 2>"$TMP/b.err"
  cb=$?
  wait $pa
  ca=$?
}
same_weights() {  # A.pt B.pt: max |a - b| over every tensor <= 1e-5
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, torch
def tensors(p):
    m = torch.jit.load(p)
    return {**dict(m.named_parameters()), **dict(m.named_buffers())}
a, b = (tensors(p) for p in sys.argv[1:])
worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
print("same" if set(a) == set(b) and worst <= 1e-5 else f"differ {worst}")
PYEOF
}

# The runs that must last (sampled, killed, cut mid-run) read synthetic data with a 20 ms sleep per
# batch (workers 0): a lower bound on their length however fast the CPU.
slow_data='data={type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 1024, test_size: 256, batch_delay_ms: 20}'

# 1. The reference: one node, two ranks, on loopback.
expect_code 0 "single-node 2-rank run" -- "$EXPRUN" launch --nproc-per-node 2 "$TMP/tiny.yaml" --out "$TMP/ref" \
  --set "$slow_data" --set data.batch_delay_ms=0

# 2. Two hosts, no GLOO_SOCKET_IFNAME.
# Every listening socket in both namespaces while the run lasts (sampled): on the veth addresses only.
(while [[ ! -e $TMP/two.done ]]; do
  ip netns exec "$A" ss -ltnH >>"$TMP/listen-a" 2>/dev/null
  ip netns exec "$B" ss -ltnH >>"$TMP/listen-b" 2>/dev/null
  sleep 0.02
done) &
sampler=$!
both "$TMP/two" --set "$slow_data"  # rank 1's Gloo listener lives >= 12 x 20 ms: the sampler sees it
touch "$TMP/two.done"
wait $sampler
check "[[ $ca == 0 && $cb == 0 ]]" "two hosts: exit codes $ca $cb: $(tail -3 "$TMP/a.err") $(tail -3 "$TMP/b.err")"
check "[[ \$(cut -d, -f1-3 \"$TMP/two/tiny.steps.csv\") == \$(cut -d, -f1-3 \"$TMP/ref/tiny.steps.csv\") ]]" \
  "two hosts: per-step losses equal the single-node run's"
check "[[ \$(same_weights \"$TMP/two/tiny.weights.pt\" \"$TMP/ref/tiny.weights.pt\") == same ]]" \
  "two hosts: final weights equal the single-node run's"
check "[[ \$(json \"$TMP/two/tiny.json\" 'j[\"provenance\"][\"gloo_interfaces\"]') == \"['$VA 10.233.0.1 (route to MASTER_ADDR 10.233.0.1)', '$VB 10.233.0.2 (route to MASTER_ADDR 10.233.0.1)']\" ]]" \
  "two hosts: each rank bound Gloo to its veth address: $(json "$TMP/two/tiny.json" 'j["provenance"].get("gloo_interfaces")')"
for side in a b; do
  addr=10.233.0.$([[ $side == a ]] && echo 1 || echo 2)
  check "grep -q \" $addr:\" \"$TMP/listen-$side\"" "node $side listened on $addr: $(sort -u "$TMP/listen-$side" | head -3)"
  check "! awk '{print \$4}' \"$TMP/listen-$side\" | grep -v \"^$addr:\" | grep -q ." \
    "node $side listened only on $addr (not 0.0.0.0, not loopback): $(awk '{print $4}' "$TMP/listen-$side" | sort -u | tr '\n' ' ')"
done
expect_grep "$TMP/a.err" "gloo: rank 1 binds to $VB 10.233.0.2 (route to MASTER_ADDR 10.233.0.1)" "the choice is logged"

# 3. A peer that never arrives: node 0 alone ends within timeout_s + 30 s naming rank 1.
# alone NS OUT NODE: that node without the other, output in TMP/out, TMP/err; sets code and took.
alone() {
  local start
  start=$(date +%s)
  host "$1" "$2" "$3" >"$TMP/out" 2>"$TMP/err"
  code=$?
  took=$(($(date +%s) - start))
}
alone "$A" "$TMP/alone" 0
check "[[ $code != 0 ]]" "a missing peer: node 0 exits non-zero"
check "(( took <= 10 + 30 ))" "a missing peer: node 0 ended after $took s (timeout_s 10)"
echo "cli_twohosts: a peer that never arrives: node 0 ended after $took s (timeout_s 10)"
expect_grep "$TMP/err" "rank(s) 1 of 2 did not arrive within 10 s" "the missing rank is named"
alone "$B" "$TMP/alone-b" 1
check "[[ $code != 0 ]] && (( took <= 10 + 30 ))" "a missing master: node 1 exits non-zero in time ($code after $took s)"
expect_grep "$TMP/err" "10.233.0.1:29511" "the unreachable store is named"

# A peer that dies during the rendezvous (both bound to loopback by hand, as PyTorch's default does
# with Debian's host names: rank 1 cannot connect and exits): rank 0 ends within timeout_s + 30 s.
start=$(date +%s)
both "$TMP/lo" --set distributed.interface=lo --set distributed.timeout_s=5
took=$(($(date +%s) - start))
check "[[ $ca != 0 && $cb != 0 ]] && (( took <= 5 + 30 + 3 ))" "a peer died in the rendezvous: exits $ca $cb after $took s"
echo "cli_twohosts: a peer dying in the rendezvous: both ended after $took s (timeout_s 5)"
# Which side fails to connect first is a race; each one either says why or, left waiting, ends
# saying so.
for side in a b; do
  check "grep -q -e 'could not form the gloo process group' -e 'has no process group 35 s after it began' \"$TMP/$side.err\"" \
    "a peer died in the rendezvous: node $side says why it ended: $(tail -2 "$TMP/$side.err")"
done

# 4. 20 ms of delay each way on the link: the run completes and waits longer for the exchange.
# Where the kernel has no netem (sch_netem), a 10 Mbit/s token bucket slows the link instead.
slow_link=""
for q in "netem delay 20ms" "tbf rate 10mbit burst 32kbit latency 400ms"; do
  # shellcheck disable=SC2086
  if ip netns exec "$A" tc qdisc add dev "$VA" root $q 2>/dev/null && ip netns exec "$B" tc qdisc add dev "$VB" root $q; then
    slow_link="$q"
    break
  fi
done
if [[ -n $slow_link ]]; then
  both "$TMP/slow" --set "$slow_data"  # as the run without it
  check "[[ $ca == 0 && $cb == 0 ]]" "$slow_link: exit codes $ca $cb: $(tail -2 "$TMP/a.err")"
  fast=$(json "$TMP/two/tiny.json" 'j["epochs"][0]["comm_wait_s"]')
  slow=$(json "$TMP/slow/tiny.json" 'j["epochs"][0]["comm_wait_s"]')
  check "\"$PY\" -c 'import sys; sys.exit(0 if $slow > $fast + 0.1 else 1)'" "$slow_link: comm wait $slow s, without it $fast s"
  echo "cli_twohosts: link slowed by $slow_link: comm wait $slow s per epoch, $fast s without"
  # The step breakdown shows it as exposed communication: a larger share of the epoch than without.
  fast_share=$(json "$TMP/two/tiny.json" 'j["epochs"][0]["breakdown"]["parts"]["comm_exposed"]["fraction"]')
  slow_share=$(json "$TMP/slow/tiny.json" 'j["epochs"][0]["breakdown"]["parts"]["comm_exposed"]["fraction"]')
  slow_max=$(json "$TMP/slow/tiny.json" 'j["epochs"][0]["breakdown"]["parts"]["comm_exposed"]["max_s"]')
  check "\"$PY\" -c 'import sys; sys.exit(0 if $slow_share > $fast_share + 0.05 and $slow_max + 0.05 >= $slow else 1)'" \
    "$slow_link: the breakdown's exposed communication: $slow_share of the epoch ($slow_max s), without it $fast_share"
  echo "cli_twohosts: breakdown: exposed communication $slow_share of the epoch on the slowed link, $fast_share without"
  ip netns exec "$A" tc qdisc del dev "$VA" root
  ip netns exec "$B" tc qdisc del dev "$VB" root
else
  echo "cli_twohosts: slow-link part skipped (neither tc netem nor tbf here)"
fi

# 5. Node 1 killed mid-run: node 0 ends within timeout_s + 30 s naming the lost peer; node 0 alone
# resumes from the last checkpoint (world size 2 -> 1) and completes. Checkpoints need one folder
# both nodes see (a cluster's shared file system): both write into TMP/kill.
# 8 epochs of 16 steps: after the first checkpoint (step 5) >= 123 x 20 ms = 2.5 s remain however
# fast the CPU, so the kill and the pulled cable (about 1 s later) come mid-run.
long=(--set train.max_steps=0 --set train.epochs=8 --set output.checkpoint.every_steps=5 --set "$slow_data")
# training OUT: a long run of both nodes into one folder, in the background (pa, pb), returning a
# second after its first committed checkpoint (training under way).
training() {
  host "$A" "$1" 0 "${long[@]}" >"$TMP/a.out" 2>"$TMP/a.err" &
  pa=$!
  host "$B" "$1" 1 "${long[@]}" >"$TMP/b.out" 2>"$TMP/b.err" &
  pb=$!
  for _ in $(seq 1 1200); do
    ls "$1/tiny.ckpt" 2>/dev/null | grep -q '^step-' && break
    sleep 0.1
  done
  sleep 1
}
training "$TMP/kill"
ip netns pids "$B" | xargs -r kill -9
start=$(date +%s)
wait $pa; ca=$?
took=$(($(date +%s) - start))
wait $pb 2>/dev/null
check "[[ $ca != 0 ]] && (( took <= 10 + 30 ))" "node 1 killed: node 0 exits non-zero in time ($ca after $took s)"
echo "cli_twohosts: node 1 killed mid-run: node 0 ended after $took s (timeout_s 10)"
expect_grep "$TMP/a.err" "10.233.0.2" "node 0 names the lost peer's address"
expect_code 0 "node 0 alone resumes (world size 2 -> 1)" -- ip netns exec "$A" "$EXPRUN" run "$TMP/tiny.yaml" \
  --out "$TMP/kill" --resume auto "${long[@]}"
expect_grep "$TMP/kill/tiny.json" '"status": "completed"' "the resumed run completed"
check "[[ \$(json \"$TMP/kill/tiny.json\" 'len(j.get(\"world_size_changes\", []))') == 1 ]]" \
  "node 0 resumed from a checkpoint of both nodes (world size 2 -> 1): $(json "$TMP/kill/tiny.json" 'j.get("world_size_changes")')"

# 6. A pulled cable: node 1's link taken down mid-run (no TCP reset reaches anyone). Each node's
# collective times out within timeout_s and says which collective at which step, who did not
# answer, that distributed.timeout_s bounded it and how to resume, with exit code 3.
training "$TMP/cut"
ip -n "$B" link set "$VB" down
start=$(date +%s)
wait $pa; ca=$?
wait $pb; cb=$?
took=$(($(date +%s) - start))
echo "cli_twohosts: a pulled cable: exits $ca $cb after $took s (timeout_s 10); node 0 said: $(grep -m1 'timed out' "$TMP/a.err"); node 1 said: $(grep -m1 'timed out' "$TMP/b.err")"
check "[[ $ca == 3 && $cb == 3 ]] && (( took <= 10 + 10 + 15 ))" \
  "a pulled cable: both nodes exit with code 3 in time ($ca $cb after $took s): $(tail -2 "$TMP/a.err") $(tail -2 "$TMP/b.err")"
expect_grep "$TMP/a.err" "timed out at step [0-9]* (epoch [0-9]*) on rank 0 of 2" "node 0 names the step"
expect_grep "$TMP/a.err" "distributed.timeout_s" "node 0 names the bound"
expect_grep "$TMP/a.err" "Rank(s) 1 (host [^)]*10.233.0.2) did not answer" "node 0 names the rank that did not answer, with its host"
expect_grep "$TMP/a.err" "with --resume auto.*$TMP/cut/tiny.ckpt/step-" "node 0 says how to resume, from which checkpoint"
expect_grep "$TMP/b.err" "timed out at step [0-9]* (epoch [0-9]*) on rank 1 of 2" "node 1 names the step"
expect_grep "$TMP/b.err" "did not answer either" "node 1 says the store is out of reach too"
ckpt=$(grep -o "newest checkpoint, [^ ]*step-[0-9]*" "$TMP/a.err" | head -1 | sed 's/newest checkpoint, //')
check "[[ -n \"$ckpt\" && -f \"$ckpt/meta.json\" ]]" "the checkpoint named exists: $ckpt"

finish cli_twohosts
