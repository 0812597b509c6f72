# Purpose: what the shell tests share. Sourced first thing, with the script's arguments
# (EXPRUN_BINARY SOURCE_DIR [VENV_PYTHON]): sets EXPRUN, ROOT, PY (the venv's python: the third
# argument, else $EXPRUN_VENV or the cache's venv), TORCHRUN, and TMP (a fresh folder removed on
# exit; a script that needs more on exit sets its own trap and removes TMP there). Then the
# assertions: counters, ok/bad,
# check (a condition), expect_code (a command's exit code; output in $TMP/out, $TMP/err),
# expect_grep (a pattern in a file), json (an expression over a JSON file, $PY), free_port ($PY),
# close (two runs' per-step losses and final parameters within bounds), and finish (no result file under TMP with an MFU above 100 %; summary and exit status).
EXPRUN="$1"
ROOT="${2:-}"
PY="${3:-}"
[[ -z $PY ]] && PY="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python"
TORCHRUN="$(dirname "$PY")/torchrun"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }  # check CONDITION DESCRIPTION
expect_code() {  # expect_code CODE DESCRIPTION -- command...
  local want="$1" what="$2"
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [[ $got == "$want" ]]; then ok; else bad "$what: exit $got, expected $want; stderr: $(tail -3 "$TMP/err")"; fi
}
expect_grep() {  # expect_grep FILE PATTERN DESCRIPTION
  if grep -q -- "$2" "$1"; then ok; else bad "$3: '$2' not in: $(tail -c 800 "$1")"; fi
}
# json FILE EXPR: EXPR evaluated with j = the file's JSON; a tuple prints its items space-separated.
json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); v=eval(sys.argv[2]); print(*v) if isinstance(v, tuple) else print(v)" "$@"; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# close REF DIR LOSS_BOUND PARAMETER_BOUND WHAT: the run $RUN's per-step losses (steps.csv) and final
# parameters (weights.pt) in DIR against REF's within the bounds (relative: max |a - b| / max |a|,
# per tensor); prints the worst differences.
close() {
  local msg
  msg=$("$PY" - "$1" "$2" "$3" "$4" "${RUN:?set RUN to the name of the runs close compares}" <<'PYEOF'
import csv, sys, torch
ref, other, bound, pbound, run = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
def steps(d):
    return [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(open(f"{d}/{run}.steps.csv"))]
def weights(d):  # parameters (buffers such as BN's batch counts follow the number of forward passes)
    return dict(torch.jit.load(f"{d}/{run}.weights.pt").named_parameters())
a, b = steps(ref), steps(other)
if [s for s, _ in a] != [s for s, _ in b]:
    print("steps differ:", [s for s, _ in b]); sys.exit()
loss = max(abs(x - y) / abs(x) for (_, x), (_, y) in zip(a, b))
wa, wb = weights(ref), weights(other)
par = max(((wb[k] - wa[k]).abs().max() / wa[k].abs().max().clamp_min(1e-6)).item() for k in wa)
print(f"{other}: worst relative difference to {ref} over {len(a)} steps: step loss {loss:.3g}, parameter {par:.3g}",
      file=sys.stderr)
if not (loss <= bound and par <= pbound):
    print(f"step loss {loss:.3g} (bound {bound}), parameter {par:.3g} (bound {pbound})")
PYEOF
)
  if [[ -z $msg ]]; then ok; else bad "$5: $msg"; fi
}
finish() {  # finish NAME: the summary line, and the script's exit status
  # No result file the test wrote holds an MFU above 100 % (that would be a wrong peak, not a figure).
  local above
  above=$("$PY" - "$TMP" <<'PYEOF'
import json, pathlib, sys
for p in pathlib.Path(sys.argv[1]).rglob("*.json"):
    try:
        j = json.loads(p.read_text())
    except (ValueError, OSError):
        continue
    for e in j.get("epochs", []) if isinstance(j, dict) and isinstance(j.get("epochs"), list) else []:
        if isinstance(e, dict) and isinstance(e.get("mfu"), (int, float)) and e["mfu"] > 1:
            print(p, "epoch", e.get("epoch"), "mfu", e["mfu"])
PYEOF
  )
  if [[ -z $above ]]; then ok; else bad "MFU above 100 % in a result file: $above"; fi
  echo "$1: $passed passed, $failed failed"
  [[ $failed == 0 ]]
}
