"""Purpose: the same training loop as `exprun run`, in Python PyTorch, for side-by-side throughput.

Fashion-MNIST from the same IDX .gz files, the same normalisation and padding-crop/flip
augmentation done per batch, torchvision's resnet18 with a 1-channel 7x7 stem and 10 classes (or
exprun's small_cnn architecture), SGD with momentum/Nesterov/weight decay, cross-entropy.
Under torchrun (WORLD_SIZE > 1) it is the same loop with torch.nn.parallel.DistributedDataParallel
on Gloo, each rank on its shard (rank r takes every W-th sample), images/s counted over all ranks
with the slowest rank's time, as exprun does.
Prints one JSON line (rank 0): {"images_per_s": ..., "steps": ..., "time_s": ...}.
"""
import argparse
import json
import time

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

from fashion_mnist import augmented_batch, read_idx, small_cnn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--model", default="resnet18", choices=["resnet18", "small_cnn"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    images = read_idx(f"{args.root}/train-images-idx3-ubyte.gz")
    labels = read_idx(f"{args.root}/train-labels-idx1-ubyte.gz").astype(np.int64)
    if args.model == "resnet18":
        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    else:
        model = small_cnn()
    model.train()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(len(labels))[rank::world]
    def batch(b):
        return augmented_batch(images, labels, perm[(b * args.batch) % len(perm):][: args.batch], rng)

    t0 = time.perf_counter()
    samples = 0
    for step in range(args.steps):
        x, y = batch(step)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        samples += len(y)
    dt = time.perf_counter() - t0
    if world > 1:
        t = torch.tensor([dt])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dt = t.item()
        samples *= world
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"images_per_s": samples / dt, "steps": args.steps, "time_s": dt, "world": world,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
