#!/usr/bin/env bash
# Purpose: the step time of sharded exprun runs (distributed.shard) against unsharded exprun and
# against PyTorch's own answers, side by side: the baby GPT (experiments/text/baby.yaml: 4 layers of
# 128, block 64, batch 12 a rank, AdamW, clipping) on 2 Gloo ranks of 1 thread, on the Fortune
# tokens; exprun with shard none / optimizer / gradients, and nanoGPT's model (NANOGPT_DIR, as
# published) under DDP + torch.optim.AdamW, DDP + ZeroRedundancyOptimizer, and FSDP2's fully_shard
# (reshard after forward, and not) via bench/zero_peer.py. Repeats alternate the sides; prints and
# writes (RESULT, default bench/results/shard_speed.json) each side's median step time over the
# repeats (each repeat: the median of steps 21..STEPS) and peak resident set per rank.
# Usage: NANOGPT_DIR=... bench/shard_speed.sh [REPEATS] [STEPS]   (default 3 repeats, 300 steps)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REPEATS="${1:-3}"
STEPS="${2:-300}"
: "${NANOGPT_DIR:?set NANOGPT_DIR to a local copy of karpathy/nanoGPT (git clone, as published)}"
EXE="${EXPRUN_BIN:-$ROOT/build/exprun}"
PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
TORCHRUN="$(dirname "$PY")/torchrun"
TEXT="${TEXT_DIR:-$ROOT/build/text/fortunes}"
RESULT="${RESULT:-$ROOT/bench/results/shard_speed.json}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
[[ -f "$TEXT/meta.json" ]] || { echo "shard_speed.sh: no tokens in $TEXT (run scripts/setup.sh)" >&2; exit 2; }

exprun_side() {  # stage repeat
  "$EXE" launch --nproc-per-node 2 "$ROOT/experiments/text/baby.yaml" --set data.dir="$TEXT" \
    --set distributed.shard="$1" --set train.threads=1 --set train.max_steps="$STEPS" --set train.eval_every_steps=0 \
    --set name="x-$1-$2" --out "$OUT" --overwrite >"$OUT/x-$1-$2.log" 2>&1 ||
    { tail -20 "$OUT/x-$1-$2.log" >&2; exit 1; }
  "$PY" - "$OUT/x-$1-$2" "$1" >>"$OUT/rows.jsonl" <<'PYEOF'
import csv, json, statistics, sys
base, stage = sys.argv[1], sys.argv[2]
t = [float(r["time_s"]) for r in csv.DictReader(open(base + ".steps.csv"))]
steps = [b - a for a, b in zip(t, t[1:])][19:]
res = json.load(open(base + ".json"))
print(json.dumps({"side": "exprun shard " + stage, "median_step_ms": 1e3 * statistics.median(steps),
                  "peak_rss_bytes_per_rank": res["epochs"][-1].get("peak_memory_bytes_per_rank"),
                  "optimizer_bytes": res["epochs"][-1].get("optimizer_bytes")}))
PYEOF
}
peer_side() {  # mode
  NANOGPT_DIR="$NANOGPT_DIR" THREADS=1 OMP_NUM_THREADS=1 "$TORCHRUN" --nproc-per-node 2 --master-port "$((29600 + RANDOM % 300))" \
    "$ROOT/bench/zero_peer.py" "$1" "$STEPS" "$TEXT" 2>"$OUT/p-$1.err" | tail -1 |
    "$PY" -c "import json, sys; r = json.load(sys.stdin); r['side'] = 'PyTorch ' + r.pop('mode'); print(json.dumps(r))" \
      >>"$OUT/rows.jsonl" || { tail -20 "$OUT/p-$1.err" >&2; exit 1; }
}
for r in $(seq "$REPEATS"); do
  for stage in none optimizer gradients; do exprun_side "$stage" "$r"; echo "exprun $stage $r done" >&2; done
  for mode in ddp zero1 fsdp2 fsdp2_noreshard; do peer_side "$mode"; echo "peer $mode $r done" >&2; done
done
"$PY" - "$OUT/rows.jsonl" "$RESULT" "$REPEATS" "$STEPS" <<'PYEOF'
import json, statistics, sys, platform
rows = [json.loads(l) for l in open(sys.argv[1])]
sides = {}
for r in rows:
    sides.setdefault(r["side"], []).append(r)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
out = {"cpu": cpu, "repeats": int(sys.argv[3]), "steps": int(sys.argv[4]), "sides": {}}
for side, rs in sides.items():
    out["sides"][side] = {"median_step_ms": statistics.median(r["median_step_ms"] for r in rs),
                          "step_ms_per_repeat": [r["median_step_ms"] for r in rs],
                          "peak_rss_bytes_per_rank": rs[-1].get("peak_rss_bytes_per_rank")}
ref = out["sides"]
for side, v in ref.items():
    print(f"{side:34s} {v['median_step_ms']:8.2f} ms  {v['step_ms_per_repeat']}  peak RSS/rank {v['peak_rss_bytes_per_rank']}")
json.dump(out, open(sys.argv[2], "w"), indent=1)
PYEOF
