"""Purpose: experiments/vit/vit-fashion-mnist.yaml's training in Python PyTorch eager, for
bench/vit_fashion_mnist.sh: torchvision's VisionTransformer (28 px, 7 px patches, 4 blocks of 128,
MLP 256) with a 1-channel patch convolution initialised as torchvision's, Fashion-MNIST from the
same IDX files with exprun's normalisation and padding-crop/flip, batch 128 (the last partial
batch kept), AdamW lr 1e-3 / wd 0.05 on tensors of 2 or more dimensions, linear warm-up from 0.1 x
over the first epoch then cosine to 0 per step, label smoothing 0.1, clipping at norm 1.0.
Prints one JSON line: images/s (training steps only) and the test Top-1 after the last epoch.
Usage: vit_loop.py --epochs N --seed S [--threads T] [--root DIR]"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torchvision

from fashion_mnist import MEAN, STD, augmented_batch, read_idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images = read_idx(f"{args.root}/train-images-idx3-ubyte.gz")
    labels = read_idx(f"{args.root}/train-labels-idx1-ubyte.gz").astype(np.int64)
    test_x = read_idx(f"{args.root}/t10k-images-idx3-ubyte.gz")
    test_y = torch.from_numpy(read_idx(f"{args.root}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = torchvision.models.VisionTransformer(image_size=28, patch_size=7, num_layers=4, num_heads=4, hidden_dim=128,
                                                 mlp_dim=256, num_classes=10)
    model.conv_proj = nn.Conv2d(1, 128, kernel_size=7, stride=7)
    nn.init.trunc_normal_(model.conv_proj.weight, std=math.sqrt(1 / (1 * 7 * 7)))
    nn.init.zeros_(model.conv_proj.bias)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    exempt = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": exempt, "weight_decay": 0.0}], lr=1e-3)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    batch_size = 128
    per_epoch = (len(labels) + batch_size - 1) // batch_size
    total = per_epoch * args.epochs
    warmup = per_epoch

    def lr_at(step):
        if step < warmup:
            return 1e-3 * (0.1 + 0.9 * step / warmup)
        return 1e-3 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    rng = np.random.default_rng(args.seed)

    step, samples, train_s = 0, 0, 0.0
    for epoch in range(args.epochs):
        model.train()
        perm = rng.permutation(len(labels))
        for b in range(per_epoch):
            if args.max_steps and step >= args.max_steps:
                break
            x, y = augmented_batch(images, labels, perm[b * batch_size:(b + 1) * batch_size], rng)
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss.item()
            train_s += time.perf_counter() - t0
            samples += len(y)
            step += 1
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(test_y), 1000):
            x = torch.from_numpy((test_x[i:i + 1000].astype(np.float32) / 255.0 - MEAN) / STD).unsqueeze(1)
            correct += (model(x).argmax(1) == test_y[i:i + 1000]).sum().item()
    print(json.dumps({"images_per_s": samples / train_s, "steps": step, "train_s": train_s,
                      "top1": 100.0 * correct / len(test_y), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
