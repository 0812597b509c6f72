#!/usr/bin/env python3
"""Purpose: an ImageFolder tree of Fashion-MNIST PNGs (root/{train,val}/<class>/*.png), the trees
on which exprun's imagefolder plugin and torchvision's reference training script are compared
(bench/reference_script.sh), from the IDX files at /usr/share/datasets/fashion-mnist, as 28x28
greyscale PNGs (both readers make RGB). Two layouts: the first TRAIN training images and the first
VAL test images in the files' order, in folders named after the classes; or (--per-class) the first
TRAIN/10 and VAL/10 of each class, in folders c0..c9.

Usage: make_fm_imagefolder.py OUT [--train 10000] [--val 2000] [--per-class]
"""
import argparse
import gzip
import pathlib
import struct

from PIL import Image

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
ROOT = pathlib.Path("/usr/share/datasets/fashion-mnist")


def idx(path):
    data = gzip.open(path).read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def write(split, prefix, count, out, per_class):
    (n, h, w), images = idx(ROOT / f"{prefix}-images-idx3-ubyte.gz")
    _, labels = idx(ROOT / f"{prefix}-labels-idx1-ubyte.gz")
    names = [f"c{k}" for k in range(len(CLASSES))] if per_class else CLASSES
    for c in names:
        (out / split / c).mkdir(parents=True, exist_ok=True)
    taken = [0] * len(names)
    quota = count // len(names)
    for i in range(n):
        if per_class and taken[labels[i]] >= quota:
            continue
        if not per_class and i >= count:
            break
        taken[labels[i]] += 1
        img = Image.frombytes("L", (w, h), images[i * h * w:(i + 1) * h * w])
        img.save(out / split / names[labels[i]] / f"{prefix}-{i:05d}.png")
    return sum(taken)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=10000)
    ap.add_argument("--val", type=int, default=2000)
    ap.add_argument("--per-class", action="store_true", help="the first TRAIN/10 and VAL/10 of each class, folders c0..c9")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    train = write("train", "train", a.train, out, a.per_class)
    val = write("val", "t10k", a.val, out, a.per_class)
    print(f"{out}: {train} training and {val} validation PNGs in {len(CLASSES)} classes")


if __name__ == "__main__":
    main()
