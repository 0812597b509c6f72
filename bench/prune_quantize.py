#!/usr/bin/env python3
"""The compression targets on this machine: runs experiments/fashion-mnist/prune-quantize-baseline.yaml
(ResNet-18, six epochs, then int8), prune-quantize.yaml (the same, half of the forward FLOPs
pruned before epoch 3) and prune-quantize-qat.yaml (the baseline with its last epoch
quantization-aware) unless their result files exist (--rerun runs them again), then checks:
  pruning: >= 50 % of the forward FLOPs removed; final Top-1 within 1 point of the baseline's (same
           epochs); inference images/s at batch 64 >= 1.6x the full-width model's (same run);
  int8:    Top-1 within 0.5 point of the fp32 model's; weights <= 0.27x; images/s at batch 64
           >= 1.5x fp32 (same run); the same Top-1 target after quantization-aware fine-tuning;
  recipe:  with --recipe (or when its result file exists) resnet18-cifar-stem.yaml, the ResNet-18
           recipe worth compressing (15 epochs: about 80 min on 2 cores), >= 94.5 % Top-1, and
           its post-training int8 within 0.5 point;
and writes a Markdown page with the report's compression table, the targets and the CPU.
Inference figures are the runs' own: each run times its models side by side at its end (median of
at least 5 timed repeats lasting 1 s in all, after warm-up), so keep the machine otherwise idle.
--requantize resumes both finished runs from their last checkpoints (`exprun run SPEC --resume`): no
training, only the end-of-run comparison again — int8 conversion, evaluation and timing — with
this build.
Usage: bench/prune_quantize.py [--out results/fashion-mnist] [--md results/fashion-mnist/prune-quantize.md]
                               [--rerun | --requantize]"""
import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXE = str(ROOT / "build" / "exprun")
SPECS = ["prune-quantize-baseline", "prune-quantize", "prune-quantize-qat"]
RECIPE = "resnet18-cifar-stem"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/fashion-mnist")
    ap.add_argument("--md", default="results/fashion-mnist/prune-quantize.md")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--requantize", action="store_true")
    ap.add_argument("--recipe", action="store_true", help="also run (or rerun) the 15-epoch recipe")
    a = ap.parse_args()
    out = ROOT / a.out
    names = SPECS + ([RECIPE] if a.recipe or (out / f"{RECIPE}.json").exists() else [])
    for name in names:
        spec = ROOT / "experiments" / "fashion-mnist" / f"{name}.yaml"
        if a.requantize:
            cmd = [EXE, "run", str(spec), "--out", str(out), "--resume"]
        elif a.rerun or not (out / f"{name}.json").exists() or (name == RECIPE and a.recipe):
            cmd = [EXE, "run", str(spec), "--out", str(out), "--overwrite"]
        else:
            continue
        with open(out / f"{name}.log", "w") as log:
            if subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT) != 0:
                sys.exit(f"{name} failed; see {out / (name + '.log')}")
    base, pruned, qat = (json.load(open(out / f"{n}.json")) for n in SPECS)
    rows = {m["model"]: m for m in base["compression"]}
    prow = {m["model"]: m for m in pruned["compression"]}
    qrow = {m["model"]: m for m in qat["compression"]}
    fp32, int8 = rows["fp32"], rows["int8"]
    full, small = prow["fp32"], prow["pruned fp32"]
    checks = [
        ("forward FLOPs removed by pruning", 1 - small["flops_per_image"] / full["flops_per_image"], ">= 50 %", lambda v: v >= 0.5, "%.1f %%", 100),
        ("pruned Top-1 − unpruned Top-1 (same 6 epochs)", small["top1"] - fp32["top1"], ">= −1 point", lambda v: v >= -1, "%+.2f points", 1),
        ("pruned / full-width images/s, batch 64", small["images_per_s_batch64"] / full["images_per_s_batch64"], ">= 1.6×", lambda v: v >= 1.6, "%.2f×", 1),
        ("int8 Top-1 − fp32 Top-1", int8["top1"] - fp32["top1"], ">= −0.5 point", lambda v: v >= -0.5, "%+.2f points", 1),
        ("int8 / fp32 weight bytes", int8["bytes"] / fp32["bytes"], "<= 0.27×", lambda v: v <= 0.27, "%.3f×", 1),
        ("int8 / fp32 images/s, batch 64", int8["images_per_s_batch64"] / fp32["images_per_s_batch64"], ">= 1.5×", lambda v: v >= 1.5, "%.2f×", 1),
        ("int8 after QAT (last epoch) Top-1 − fp32 Top-1 (same 6 epochs)", qrow["int8 (QAT)"]["top1"] - fp32["top1"], ">= −0.5 point",
         lambda v: v >= -0.5, "%+.2f points", 1),
        ("int8 after QAT Top-1 − post-training int8 Top-1", qrow["int8 (QAT)"]["top1"] - int8["top1"], "—", lambda v: True, "%+.2f points", 1),
    ]
    recipe = None
    if RECIPE in names:
        recipe = json.load(open(out / f"{RECIPE}.json"))
        rrow = {m["model"]: m for m in recipe["compression"]}
        checks += [
            ("recipe (resnet18-cifar-stem.yaml) test Top-1", rrow["fp32"]["top1"], ">= 94.5 %", lambda v: v >= 94.5, "%.2f %%", 1),
            ("recipe: int8 Top-1 − fp32 Top-1", rrow["int8"]["top1"] - rrow["fp32"]["top1"], ">= −0.5 point", lambda v: v >= -0.5,
             "%+.2f points", 1),
            ("recipe: int8 / fp32 images/s, batch 64", rrow["int8"]["images_per_s_batch64"] / rrow["fp32"]["images_per_s_batch64"],
             ">= 1.5×", lambda v: v >= 1.5, "%.2f×", 1),
        ]
    report = subprocess.run([EXE, "report"] + [str(out / f"{n}.json") for n in names] + ["--format", "md"],
                            check=True, capture_output=True, text=True).stdout
    cpu = base["provenance"].get("device_name", "?")
    feats = ", ".join(base["provenance"].get("device_features", []))
    md = [f"# Pruning and int8 on Fashion-MNIST (ResNet-18)\n",
          f"Measured by `bench/prune_quantize.py` on {cpu} ({feats}), "
          f"{base['provenance'].get('threads', '?')} threads, LibTorch {base['provenance'].get('libtorch_version', '?')}.\n",
          "| target | measured | wanted | met |", "|---|---:|---:|---|"]
    failed = 0
    for what, v, want, ok, fmt, scale in checks:
        met = ok(v)
        failed += not met
        md.append(f"| {what} | {fmt % (v * scale)} | {want} | {'yes' if met else 'no'} |")
    md.append("\nTraining time per epoch (s), from the result files (it depends on what else ran on the machine):\n")
    for run in (base, pruned, qat) + ((recipe,) if recipe else ()):
        steps = {p["epoch"]: p for p in run.get("methods", {}).get("prune", {}).get("steps", run.get("prune_steps", []))}
        md.append(f"- {run['name']}: " + ", ".join(
            f"{e['time_s']:.0f}" + (" (pruned before it)" if e["epoch"] in steps else "") for e in run["epochs"]))
    md.append("\n## exprun report\n")
    md.append(report)
    text = "\n".join(md) + "\n"
    (ROOT / a.md).write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
