"""The peers of sharded exprun runs (bench/shard_speed.sh): nanoGPT's GPT (its model.py, imported
from NANOGPT_DIR as published) trained on the same character tokens with PyTorch's own data
parallelism on Gloo ranks: DDP with torch.optim.AdamW (stage 0), DDP with
torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO stage 1), or FSDP2's fully_shard per block and
on the whole model (stage 3, reshard_after_forward=True; stage 2: False). One process per rank
(torchrun); prints the median step time (ms) of the steps after the warm-up, each step's loss, and
the peak resident set of this rank, as JSON on rank 0.
Usage: torchrun --nproc-per-node 2 bench/zero_peer.py MODE STEPS TOKENS_DIR   (MODE: ddp, zero1, fsdp2, fsdp2_noreshard)
"""
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.environ["NANOGPT_DIR"])
from model import GPT, GPTConfig  # noqa: E402  (nanoGPT's, as published)


def main():
    mode, steps, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1337)
    meta = json.load(open(os.path.join(tokens, "meta.json")))
    cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=meta["vocab_size"], dropout=0.0,
                    bias=False)
    model = GPT(cfg)
    data = np.memmap(os.path.join(tokens, "train.bin"), dtype=np.uint16, mode="r")
    batch, block = 12, 64
    if mode in ("ddp", "zero1"):
        net = torch.nn.parallel.DistributedDataParallel(model)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
        if mode == "ddp":
            opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
        else:  # ZeroRedundancyOptimizer takes one group first, then the others
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, lr=1e-3, betas=(0.9, 0.99),
                                          weight_decay=0.1)
            opt.add_param_group({"params": other, "weight_decay": 0.0})
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        reshard = mode == "fsdp2"
        for block_module in model.transformer.h:
            fully_shard(block_module, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        net = model
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(1000 + rank)
    times, losses = [], []
    for step in range(steps):
        ix = torch.randint(len(data) - block - 1, (batch,), generator=gen)
        x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
        t0 = time.perf_counter()
        _, loss = net(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    warm = min(20, steps // 4)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peaks = [None] * world
    dist.all_gather_object(peaks, peak)
    if rank == 0:
        print(json.dumps({"mode": mode, "world": world, "median_step_ms": 1e3 * float(np.median(times[warm:])),
                          "peak_rss_bytes_per_rank": peaks, "last_loss": losses[-1]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
