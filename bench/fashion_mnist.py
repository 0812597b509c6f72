"""Purpose: what the Python bench loops share with exprun: Fashion-MNIST's IDX .gz reader and
exprun's small_cnn architecture (two conv-BN-ReLU-maxpool stages of width and 2*width channels,
bias-free convolutions, a hidden layer with dropout, 10 classes)."""
import gzip

import numpy as np
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def small_cnn(width=32, hidden=128, dropout=0.25):
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(True),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * width * 49, hidden), nn.ReLU(True), nn.Dropout(dropout),
        nn.Linear(hidden, 10))
