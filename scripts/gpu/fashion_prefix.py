"""Purpose: a small copy of Fashion-MNIST for the GPU machine, which has no dataset package and
whose carry is limited (the real files are 30 MB): the four IDX .gz files with the same headers and
counts (the fashion_mnist plugin checks 60,000 and 10,000), the first N images of each split real
and the rest zero (compressed to almost nothing), the labels whole. The GPU-only tests train on at
most the first 1,024 training and 500 test images, so they see the real data.
Usage: python3 fashion_prefix.py SRC_DIR DST_DIR [N_TRAIN [N_TEST]]"""
import gzip
import os
import sys

src, dst = sys.argv[1], sys.argv[2]
keep = {"train": int(sys.argv[3]) if len(sys.argv) > 3 else 2048, "t10k": int(sys.argv[4]) if len(sys.argv) > 4 else 1024}
os.makedirs(dst, exist_ok=True)
for split, n in keep.items():
    with gzip.open(f"{src}/{split}-images-idx3-ubyte.gz", "rb") as f:
        data = f.read()
    header, pixels = data[:16], data[16:]
    with gzip.open(f"{dst}/{split}-images-idx3-ubyte.gz", "wb", compresslevel=9) as f:
        f.write(header + pixels[: n * 784] + bytes(len(pixels) - n * 784))
    with open(f"{src}/{split}-labels-idx1-ubyte.gz", "rb") as f, open(f"{dst}/{split}-labels-idx1-ubyte.gz", "wb") as g:
        g.write(f.read())
