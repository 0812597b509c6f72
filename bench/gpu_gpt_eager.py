"""The reference for the GPU check's GPT-2 step: nanoGPT's own model.py (a copy of the repository
given by path, run as published) at GPT-2 124M (12 layers, 12 heads, 768 wide, block 1024,
vocabulary 50,304, no dropout, biases), its configure_optimizers (AdamW lr 6e-4, betas 0.9/0.95,
weight decay 0.1 on the matrices, fused on CUDA), bf16 autocast, a batch of BATCH random sequences
resident on the GPU, optionally under torch.compile. Tokens/s over STEPS steps after WARMUP,
CUDA-synchronised; peak allocated memory.
Usage: gpu_gpt_eager.py NANOGPT_DIR BATCH STEPS WARMUP [compile]  -> one JSON line"""
import json
import sys
import time

import torch

sys.path.insert(0, sys.argv[1])
from model import GPT, GPTConfig  # noqa: E402  nanoGPT's

batch, steps, warmup = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
compiled = len(sys.argv) > 5 and sys.argv[5] == "compile"
torch.manual_seed(0)
dev = torch.device("cuda")
model = GPT(GPTConfig(block_size=1024, vocab_size=50304, n_layer=12, n_head=12, n_embd=768, dropout=0.0, bias=True)).to(dev)
opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cuda")
if compiled:
    model = torch.compile(model)
x = torch.randint(0, 50257, (batch, 1024), device=dev)
y = torch.randint(0, 50257, (batch, 1024), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


for _ in range(warmup):
    step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(steps):
    loss = step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(json.dumps({"tokens_per_s": steps * batch * 1024 / dt, "ms_per_step": 1e3 * dt / steps, "compiled": compiled,
                  "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": loss.item(),
                  "torch": torch.__version__}))
