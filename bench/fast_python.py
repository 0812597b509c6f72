"""Purpose: experiments/fashion-mnist/fast.yaml's recipe in Python PyTorch, written as a strong user
would write it, for bench/time_to_accuracy.sh to race against `exprun run` on the same libtorch.

The recipe: exprun's small_cnn (two conv-BN-ReLU-maxpool stages of 16 and 32 channels, a 256-unit
hidden layer with dropout 0.25, 10 classes; bias-free convolutions), Fashion-MNIST held in memory
as one normalised float tensor (the same IDX files and normalisation), random horizontal flips on
the fly per batch (on tensors, no Python loop), SGD (Nesterov momentum 0.9, weight decay 5e-4),
one-cycle learning rate (OneCycleLR, peak lr, pct_start, momentum cycled 0.95 -> 0.85), label
smoothing, batch 128, float32, 2 intra-op threads; evaluation on the 10,000 test images (batch 500,
inference mode) at every epoch's end and every --eval-every steps; the run stops at the first
evaluation reaching --target. --compile wraps the model in torch.compile (its compile time is paid
inside the timed run, as a user pays it).

Prints one JSON line: time_to_target_s (from the start of main(), after `import torch`, to the
end of the evaluation that met the target; null if never), the evaluation's step and epoch, its
Top-1, images/s of training, and the wall time of main().
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from fashion_mnist import read_idx, small_cnn


def main():
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.2, help="peak learning rate (exprun's lr scaled to the batch)")
    ap.add_argument("--pct-start", type=float, default=0.25)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--hflip", action="store_true")
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (0: epoch ends only)")
    ap.add_argument("--eval-batch", type=int, default=500)
    ap.add_argument("--target", type=float, default=92.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--channels-last", action="store_true", help="model and batches in channels_last (NHWC) layout")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    mean, std = 0.2860, 0.3530
    def load(split):
        x = torch.from_numpy(read_idx(f"{args.root}/{split}-images-idx3-ubyte.gz").copy())
        y = torch.from_numpy(read_idx(f"{args.root}/{split}-labels-idx1-ubyte.gz").astype(np.int64))
        return ((x.float() / 255 - mean) / std).unsqueeze(1).contiguous(), y
    train_x, train_y = load("train")
    test_x, test_y = load("t10k")

    model = small_cnn(args.width, args.hidden, 0.25)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=layout)
    test_x = test_x.contiguous(memory_format=layout)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps_per_epoch = math.ceil(len(train_y) / args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * steps_per_epoch,
                                                pct_start=args.pct_start)
    net = torch.compile(model) if args.compile else model

    def evaluate():
        net.eval()
        correct = 0
        with torch.inference_mode():
            for i in range(0, len(test_y), args.eval_batch):
                correct += (net(test_x[i:i + args.eval_batch]).argmax(1) == test_y[i:i + args.eval_batch]).sum().item()
        net.train()
        return 100.0 * correct / len(test_y)

    gen = torch.Generator().manual_seed(args.seed)
    step, hit, train_seconds, images = 0, None, 0.0, 0
    evals = []
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(train_y), generator=gen)
        t_epoch = time.perf_counter()
        for b in range(steps_per_epoch):
            idx = perm[b * args.batch:(b + 1) * args.batch]
            x, y = train_x[idx], train_y[idx]
            if args.hflip:
                flip = torch.rand(len(idx), generator=gen) < 0.5
                x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            x = x.contiguous(memory_format=layout)
            loss = F.cross_entropy(net(x), y, label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            images += len(idx)
            last = b == steps_per_epoch - 1
            if last or (args.eval_every and step % args.eval_every == 0):
                train_seconds += time.perf_counter() - t_epoch
                top1 = evaluate()
                evals.append({"step": step, "epoch": epoch, "val_top1": top1, "time_s": time.perf_counter() - t0})
                t_epoch = time.perf_counter()
                if top1 >= args.target:
                    hit = evals[-1]
                    break
        if hit:
            break
    print(json.dumps({"mode": "compile" if args.compile else "eager", "time_to_target_s": hit and hit["time_s"],
                      "target_step": hit and hit["step"], "target_epoch": hit and hit["epoch"],
                      "target_top1": hit and hit["val_top1"], "images_per_s": images / max(train_seconds, 1e-9),
                      "evals": evals, "main_s": time.perf_counter() - t0, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
