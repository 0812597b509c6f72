#!/usr/bin/env python3
"""Purpose: an ImageFolder tree of Fashion-MNIST PNGs (root/{train,val}/<class>/*.png), the tree
on which exprun's imagefolder plugin and torchvision's reference training script are compared
(bench/reference_script.sh): the first TRAIN training images and the first VAL test images of the
IDX files at /usr/share/datasets/fashion-mnist, as 28x28 greyscale PNGs (both readers make RGB).

Usage: make_fm_imagefolder.py OUT [--train 10000] [--val 2000]
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


def write(split, prefix, count, out):
    (n, h, w), images = idx(ROOT / f"{prefix}-images-idx3-ubyte.gz")
    _, labels = idx(ROOT / f"{prefix}-labels-idx1-ubyte.gz")
    for c in CLASSES:
        (out / split / c).mkdir(parents=True, exist_ok=True)
    for i in range(min(count, n)):
        img = Image.frombytes("L", (w, h), images[i * h * w:(i + 1) * h * w])
        img.save(out / split / CLASSES[labels[i]] / f"{prefix}-{i:05d}.png")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=10000)
    ap.add_argument("--val", type=int, default=2000)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    write("train", "train", a.train, out)
    write("val", "t10k", a.val, out)
    print(f"{out}: {a.train} training and {a.val} validation PNGs in {len(CLASSES)} classes")


if __name__ == "__main__":
    main()
