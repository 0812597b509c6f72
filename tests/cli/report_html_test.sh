#!/usr/bin/env bash
# Purpose: the HTML report in a real browser: `exprun report --format html` on fixture result files,
# rendered by headless Chromium — the DOM must hold the table rows and the six SVG charts with
# their titles, and a 1280x2400 screenshot must be a non-trivial image (PIL from the venv).
# Chromium is installed by scripts/setup.sh; without it this test fails (it does not skip).
# Usage: report_html_test.sh EXPRUN_BINARY SOURCE_DIR VENV_PYTHON
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh" "$@"

CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z $CHROMIUM ]]; then
  echo "FAIL: chromium not found on PATH; scripts/setup.sh installs it (apt-get install chromium)" >&2
  exit 1
fi
# A private profile: no clash with other Chromium instances, nothing left in $HOME.
browser() { timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/profile" "$@"; }

DATA="$ROOT/tests/fixtures/report"
if "$EXPRUN" report "$DATA/cnn-fp32.json" "$DATA/cnn-bf16-gpu.json" "$DATA/cnn-2ranks.json" \
  --format html -o "$TMP/report.html" 2>"$TMP/err"; then ok; else bad "exprun report --format html: $(cat "$TMP/err")"; fi

browser --dump-dom "file://$TMP/report.html" >"$TMP/dom.html" 2>"$TMP/chromium.err"
[[ -s $TMP/dom.html ]] && ok || bad "chromium --dump-dom printed nothing: $(tail -5 "$TMP/chromium.err")"
svgs=$(grep -o '<svg' "$TMP/dom.html" | wc -l)
[[ $svgs == 6 ]] && ok || bad "the DOM has $svgs <svg> charts, expected 6"
for title in "Mean epoch time" "Throughput" "Memory per process" "Validation Top-1 per epoch" "Training loss per epoch"; do
  expect_grep "$TMP/dom.html" "<title>$title</title>" "chart '$title'"
done
rows=$(grep -o '<tr class="run' "$TMP/dom.html" | wc -l)
[[ $rows == 3 ]] && ok || bad "the table has $rows run rows, expected 3"
for name in cnn-fp32 cnn-bf16-gpu cnn-2ranks; do expect_grep "$TMP/dom.html" "$name" "run $name in the DOM"; done
expect_grep "$TMP/dom.html" "38.5 s" "formatted epoch time in the table"
expect_grep "$TMP/dom.html" "10.00×" "speed-up in the table"
expect_grep "$TMP/dom.html" "host vm vs gpu01" "provenance note"
grep -q '<polyline' "$TMP/dom.html" && ok || bad "no line drawn in the line charts"

browser --screenshot="$TMP/out.png" --window-size=1280,2400 "file://$TMP/report.html" >/dev/null 2>>"$TMP/chromium.err"
if [[ -s $TMP/out.png ]]; then
  ok
  size=$(stat -c %s "$TMP/out.png")
  ((size > 20000)) && ok || bad "screenshot is only $size bytes"
  if "$PY" - "$TMP/out.png" <<'PY'; then ok; else bad "screenshot check failed"; fi
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
assert img.size == (1280, 2400), f"size {img.size}"
colors = img.getcolors(maxcolors=1 << 20)
assert colors is not None and len(colors) > 16, f"only {0 if colors is None else len(colors)} colours"
# The charts are drawn: the run colours (Tableau blue, orange, red) cover visible areas.
counts = {c: n for n, c in colors}
for rgb in [(0x4e, 0x79, 0xa7), (0xf2, 0x8e, 0x2b), (0xe1, 0x57, 0x59)]:
    assert counts.get(rgb, 0) > 500, f"colour {rgb} covers {counts.get(rgb, 0)} pixels"
PY
else
  bad "chromium --screenshot wrote no PNG: $(tail -5 "$TMP/chromium.err")"
fi

finish report_html
