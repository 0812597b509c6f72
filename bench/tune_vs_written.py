#!/usr/bin/env python3
"""Do short trials predict full runs? For each spec: `exprun tune` (its budget timed), then full
epochs of the spec as written, its fp32 variant, its other process layout (1 process when written
for several, 2 when written for one; same global batch), and the tuned spec, in ROUNDS alternated
rounds (the order reversed every other round); images/s of the epoch from each result file, median
per variant. Reports tuned / best-of-all and tuned / written (targets: >= 0.95 and >= 1.0) and the
time tune took against its budget (target: within 10 %).
Usage: bench/tune_vs_written.py [--budget 5min] [--rounds 3] [--out results/local/tune] [SPEC:NPROC ...]
(after scripts/setup.sh; default specs: DEFAULT, three of experiments/fashion-mnist/)."""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXE = str(ROOT / "build" / "exprun")
DEFAULT = ["experiments/fashion-mnist/compare-2proc-opt.yaml:2", "experiments/fashion-mnist/fast.yaml:1",
           "experiments/fashion-mnist/compare-1proc.yaml:1"]
EPOCH = ["train.epochs=1", "train.eval=false", "output.tensorboard=false", "output.steps_csv=false"]


def run(cmd, log):
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    if code != 0:
        sys.exit(f"failed ({code}): {' '.join(cmd)}; see {log}")


def epoch_images_per_s(spec, nproc, sets, name, out):
    cmd = [EXE, "launch", "--nproc-per-node", str(nproc), spec] if nproc > 1 else [EXE, "run", spec]
    for s in EPOCH + sets + [f"name={name}"]:
        cmd += ["--set", s]
    cmd += ["--out", str(out), "--overwrite"]
    run(cmd, out / f"{name}.log")
    return json.load(open(out / f"{name}.json"))["epochs"][0]["images_per_s"]


def variants(spec, nproc, trials, tuned):
    """(label, spec, nproc, --set list) of the four runs."""
    w = trials["candidates"][trials["written"]]["setting"]
    cores = os.cpu_count()
    v = [("as written", spec, nproc, [])]
    if w["precision"] != "fp32":
        v.append(("fp32 variant", spec, nproc, ["train.precision=fp32"]))
    if nproc > 1:
        v.append(("1-process variant", spec, 1, [f"train.threads={cores}", f"train.accumulate={w['accumulate'] * nproc}"]))
    elif w["batch_size"] % 2 == 0:
        v.append(("2-process variant", spec, 2, [f"train.threads={max(1, cores // 2)}", f"train.batch_size={w['batch_size'] // 2}"]))
    win = trials["candidates"][trials["winner"]]["setting"]
    v.append(("tuned", str(tuned), win["processes"], []))
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", default="5min")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "results" / "local" / "tune"))
    ap.add_argument("specs", nargs="*", default=DEFAULT)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    lines = [f"# exprun tune against full epochs\n", f"CPU: {cpu}, {os.cpu_count()} threads; budget {a.budget}; "
             f"{a.rounds} alternated rounds of one full epoch each (images/s of the epoch, median).\n"]
    for item in a.specs:
        spec, nproc = item.rsplit(":", 1)
        nproc = int(nproc)
        stem = pathlib.Path(spec).stem
        tuned, trials_path = out / f"{stem}-tuned.yaml", out / f"{stem}-trials.json"
        t0 = time.monotonic()
        run([EXE, "tune", spec, "--nproc", str(nproc), "--time-budget", a.budget, "--write", str(tuned),
             "--json", str(trials_path)], out / f"{stem}-tune.log")
        took = time.monotonic() - t0
        trials = json.load(open(trials_path))
        vs = variants(spec, nproc, trials, tuned)
        speeds = {label: [] for label, *_ in vs}
        for r in range(a.rounds):
            for label, s, n, sets in (vs if r % 2 == 0 else list(reversed(vs))):
                name = f"{stem}-{label.split()[0]}-r{r + 1}"
                speeds[label].append(epoch_images_per_s(s, n, sets, name, out / "runs"))
                print(f"{stem} round {r + 1}: {label}: {speeds[label][-1]:.0f} images/s", flush=True)
        med = {k: statistics.median(v) for k, v in speeds.items()}
        best = max(med.values())
        win = trials["candidates"][trials["winner"]]
        lines.append(f"\n## {spec} (written for {nproc} process(es))\n")
        lines.append(f"tune: {took:.0f} s for a budget of {trials['budget_s']:.0f} s ({took / trials['budget_s']:.2f}x), "
                     f"{sum(len(c['trials']) for c in trials['candidates'])} trials; chose: {win['differs']}\n")
        lines.append("| run | images/s (median) | rounds | vs as written |\n|---|---|---|---|\n")
        for label in speeds:
            lines.append(f"| {label} | {med[label]:.0f} | {', '.join(f'{x:.0f}' for x in speeds[label])} | "
                         f"{med[label] / med['as written']:.2f}x |\n")
        lines.append(f"\ntuned / best of all: {med['tuned'] / best:.3f} (target >= 0.95); tuned / as written: "
                     f"{med['tuned'] / med['as written']:.3f} (target >= 1.0)\n")
        print("".join(lines[-(len(speeds) + 5):]), flush=True)
    (out / "summary.md").write_text("".join(lines))
    print(f"summary: {out / 'summary.md'}")


if __name__ == "__main__":
    main()
