"""Purpose: bench/time_to_accuracy.sh's summary: runs (one JSON object per line: program, run,
time_to_target_s, wall_s, images_per_s, ...) -> medians per program and exprun's ratios to the
Python runs, written to OUT (JSON) and printed.
Usage: time_to_accuracy_summary.py RUNS.jsonl OUT.json [RECIPE=experiments/fashion-mnist/fast.yaml]
"""
import json
import os
import statistics
import sys

import torch

runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def median(program, key):  # None unless every run of the program has the figure (a target missed: none)
    values = [r.get(key) for r in runs if r["program"] == program]
    return statistics.median(values) if values and None not in values else None


programs = ("exprun", "exprun-unfused", "python-eager", "python-compile")
medians = {p: {k: median(p, k) for k in ("time_to_target_s", "wall_s", "images_per_s")} for p in programs}


def ratio(a, b, key):
    x, y = medians[a][key], medians[b][key]
    return x / y if x is not None and y else None


ratios = {f"{a.replace('-', '_')}_vs_{b.split('-')[1]}_{key}": ratio(a, b, key)
          for a in programs[:2] for b in programs[2:] for key in ("time_to_target_s", "wall_s", "images_per_s")}
ratios.update({f"exprun_vs_unfused_{key}": ratio("exprun", "exprun-unfused", key)
               for key in ("time_to_target_s", "wall_s", "images_per_s")})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
recipe = sys.argv[3] if len(sys.argv) > 3 else "experiments/fashion-mnist/fast.yaml"
out = {"recipe": recipe, "target_top1": 92.0, "torch": torch.__version__, "cpu": cpu,
       "cores": os.cpu_count(), "runs": runs, "medians": medians, "ratios": ratios}
json.dump(out, open(sys.argv[2], "w"), indent=2)
print(json.dumps({"medians": medians, "ratios": ratios}, indent=2))
