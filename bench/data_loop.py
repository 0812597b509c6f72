"""The reference input pipeline: torchvision's ImageFolder with PIL and the standard ImageNet
training transform (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize), through a
DataLoader with WORKERS worker processes, for EPOCHS epochs; prints one JSON line with images/s.
Usage: data_loop.py ROOT WORKERS BATCH EPOCHS"""
import json
import sys
import time

import torch
import torchvision
from torchvision import transforms

root, workers, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
tf = transforms.Compose([
    transforms.RandomResizedCrop(224),
    transforms.RandomHorizontalFlip(),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
])
ds = torchvision.datasets.ImageFolder(root + "/train", tf)
loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     persistent_workers=False, prefetch_factor=2 if workers else None)
images, checksum = 0, 0.0
t0 = time.perf_counter()
for _ in range(epochs):
    for x, y in loader:
        images += x.shape[0]
        checksum += float(x[0, 0, 0, 0])
s = time.perf_counter() - t0
print(json.dumps({"images": images, "seconds": round(s, 4), "images_per_s": round(images / s, 2)}))
