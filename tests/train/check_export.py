"""Loads an exprun safetensors export into torchvision's model (strict) and compares its output
with exprun's on the same input. Usage: check_export.py WEIGHTS.safetensors IO.safetensors ARCH NUM_CLASSES
IO holds 'x' (input) and 'y' (exprun's eval-mode output). Exit 0 when they agree."""
import sys

import torch
import torchvision
from safetensors.torch import load_file

weights, io, arch, classes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model = getattr(torchvision.models, arch)(num_classes=classes)
missing = model.load_state_dict(load_file(weights), strict=True)
model.eval()
t = load_file(io)
with torch.no_grad():
    y = model(t["x"])
diff = (y - t["y"]).abs().max().item()
print(f"max |torchvision - exprun| = {diff:.3g}")
sys.exit(0 if diff < 1e-4 else 1)
