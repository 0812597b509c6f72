"""Purpose: what the Python bench loops share with exprun: Fashion-MNIST's IDX .gz reader, its
training augmentation (augmented_batch) and exprun's small_cnn architecture (two conv-BN-ReLU-maxpool stages of width and 2*width channels,
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


MEAN, STD, PAD = 0.2860, 0.3530, 2


def augmented_batch(images, labels, idx, rng):
    """The samples idx as exprun's fashion_mnist plugin trains on them (random_crop_padding 2, hflip):
    zero padding of 2, a random 28x28 crop, a random horizontal flip, normalised; ([N,1,28,28], [N])."""
    import torch
    x = images[idx].astype(np.float32)
    padded = np.zeros((len(idx), 28 + 2 * PAD, 28 + 2 * PAD), np.float32)
    padded[:, PAD:PAD + 28, PAD:PAD + 28] = x
    out = np.empty((len(idx), 28, 28), np.float32)
    offs = rng.integers(0, 2 * PAD + 1, size=(len(idx), 2))
    flips = rng.integers(0, 2, size=len(idx))
    for i in range(len(idx)):
        crop = padded[i, offs[i, 0]:offs[i, 0] + 28, offs[i, 1]:offs[i, 1] + 28]
        out[i] = crop[:, ::-1] if flips[i] else crop
    return torch.from_numpy((out / 255.0 - MEAN) / STD).unsqueeze(1), torch.from_numpy(labels[idx])
