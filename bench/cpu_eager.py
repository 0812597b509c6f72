"""The reference for bench/resnet50_cpu_vs_eager.sh: the training step of
experiments/bench/resnet50-cpu.yaml in PyTorch eager on the CPU — torchvision resnet50, SGD momentum
0.9 + weight decay 1e-4, cross-entropy, optional bf16 autocast, channels_last, a batch of random
224x224 images resident in memory, THREADS intra-op threads. Images/s over STEPS steps after WARMUP.
Usage: cpu_eager.py PRECISION BATCH STEPS WARMUP THREADS  -> one JSON line"""
import json
import sys
import time

import torch
import torchvision

precision, batch, steps, warmup, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = torchvision.models.resnet50().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, 224, 224).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,))


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), y)
    loss.backward()
    opt.step()
    return loss


for _ in range(warmup):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
elapsed = time.perf_counter() - t0
print(json.dumps({"precision": precision, "images_per_s": steps * batch / elapsed, "loss": float(loss.detach())}))
