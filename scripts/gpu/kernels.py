#!/usr/bin/env python3
# Purpose: GPU kernel time by kind, per step, from a trace that `exprun profile` wrote (Chrome JSON,
# torch profiler / Kineto): a table by kind (batch norm, convolutions, elementwise, copies,
# pooling, reductions), with launches per step. Usage: kernels.py TRACE.json STEPS
import gzip
import json
import re
import sys

KINDS = [  # first match wins
    ("batch norm (ATen's, or exprun's fused bnact)", r"batch_norm|bnact::|welford|BatchNorm|bn_fw|bn_bw"),
    ("conv/gemm", r"conv|gemm|cutlass|xmma|cudnn|nvjet|wgrad|dgrad|fprop|implicit_convolve|sm90_"),
    ("max pool", r"max_pool|MaxPool"),
    ("reductions (grad norm, finite checks, loss)", r"reduce|norm|non_finite|softmax|nll|cross_entropy|Reduce"),
    ("elementwise (relu, add, optimizer, casts)", r"elementwise|vectorized|foreach|fused_sgd|FusedSgd|fused_adam|threshold|relu|add|mul|copy_|CatArray|fill|unrolled|index"),
]


def main(path, steps):
    events = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    time, count = {}, {}
    for e in events:
        cat = e.get("cat", "")
        if cat == "kernel":
            name = e.get("name", "")
            kind = next((k for k, rx in KINDS if re.search(rx, name)), "other")
        elif cat in ("gpu_memcpy", "gpu_memset"):
            kind = "memcpy/memset"
        else:
            continue
        time[kind] = time.get(kind, 0.0) + float(e.get("dur", 0)) / 1000.0
        count[kind] = count.get(kind, 0) + 1
    total = sum(time.values())
    for kind, ms in sorted(time.items(), key=lambda t: -t[1]):
        print(f"  {kind:<48} {ms / steps:6.1f} ms {100 * ms / max(total, 1e-9):5.1f}%  {count[kind] // steps} launches/step")
    print(f"  total {total / steps:.1f} ms/step of kernels")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
