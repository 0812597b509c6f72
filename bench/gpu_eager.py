"""The reference for the GPU check: the same training step as experiments/bench/resnet50-gpu.yaml in
PyTorch eager — torchvision resnet50, SGD momentum 0.9 + weight decay, cross-entropy, autocast
(bf16, or fp16 with GradScaler), channels_last, batch 256 of random 224x224 images resident on the
GPU. Images/s over STEPS steps after WARMUP, CUDA-synchronised; peak allocated memory.
Usage: gpu_eager.py PRECISION STEPS WARMUP  -> one JSON line"""
import json
import sys
import time

import torch
import torchvision

precision, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
dev = torch.device("cuda")
model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (256,), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


for _ in range(warmup):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
torch.cuda.synchronize()
s = time.perf_counter() - t0
print(json.dumps({"precision": precision, "steps": steps, "seconds": s, "images_per_s": steps * 256 / s,
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss),
                  "device": torch.cuda.get_device_name(), "torch": torch.__version__}))
