#!/usr/bin/env python3
"""The GPU check's verdict on one opt-in path: its run's per-step losses against the measured
default's, step by step (the same spec, seed and data). Prints one line: the path, whether it ran,
and whether it matched (largest relative loss difference within TOL), so that the next session with a
GPU can switch defaults by what it ran.
Usage: paths.py NAME DEFAULT_DIR PATH_DIR TOL [EXIT_CODE]"""
import csv
import glob
import sys

name, base, cand, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
code = int(sys.argv[5]) if len(sys.argv) > 5 else 0


def losses(folder):
    files = glob.glob(folder + "/*.steps.csv")
    return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(files[0]))} if files else {}


if code != 0:
    print(f"PATH {name}: did not run (exit {code})")
    sys.exit(0)
a, b = losses(base), losses(cand)
common = sorted(set(a) & set(b))
if not common or len(common) < len(a):
    print(f"PATH {name}: ran, but its steps ({len(b)}) do not cover the default's ({len(a)})")
    sys.exit(0)
worst = max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-12) for s in common)
verdict = "matched" if worst <= tol else "DIFFERS"
print(f"PATH {name}: ran, {verdict} the default over {len(common)} steps "
      f"(largest relative loss difference {worst:.2e}, tolerance {tol:g})")
