#!/usr/bin/env python3
"""Builds ImageFolder trees of real photographs for exprun's tests and benchmark.

Source: the four photographs in tests/data/photos (public domain / CC0, see README.md there).
Every image is a scaled and cropped variant of one photograph, written with Pillow.

  make_image_tree.py test DIR    the test set-up: DIR/good (train/val, 4 classes; greyscale,
                                 CMYK, progressive, PNG and large variants; a nested folder and a
                                 non-image file), DIR/bad (truncated, corrupt, empty, unsupported),
                                 list files, and DIR/reference/*.bin: Pillow's output for fixed crops
                                 (uint8 HWC) that the decoder is compared with.
  make_image_tree.py bench DIR N N ImageNet-like JPEGs (about 500x375, quality 90) in DIR/train
                                 (10 class folders) and DIR/val, deterministic.
"""
import json
import os
import random
import shutil
import sys

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
PHOTOS = ["astronaut", "chelsea", "coffee", "rocket"]


def photos():
    return {p: Image.open(os.path.join(HERE, "photos", p + ".jpg")).convert("RGB") for p in PHOTOS}


def variant(img, rng, width, height):
    """A random crop of `img` (at least half of each side) resized to width x height."""
    w, h = img.size
    cw = rng.randint(w // 2, w)
    ch = rng.randint(h // 2, h)
    x = rng.randint(0, w - cw)
    y = rng.randint(0, h - ch)
    return img.crop((x, y, x + cw, y + ch)).resize((width, height), Image.BICUBIC)


def save(img, path, **kw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path, **kw)


def make_test(root):
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(1234)
    src = photos()
    good = os.path.join(root, "good")
    for split, count in (("train", 5), ("val", 2)):
        for cls, img in src.items():
            for i in range(count):
                w, h = rng.choice([(320, 240), (240, 320), (300, 300), (400, 260)])
                save(variant(img, rng, w, h), f"{good}/{split}/{cls}/{cls}_{i}.jpg", quality=90)
    # Special encodings, all of real content.
    save(variant(src["coffee"], rng, 280, 210).convert("L"), f"{good}/train/coffee/grey.JPEG", quality=90)
    save(variant(src["chelsea"], rng, 256, 192).convert("CMYK"), f"{good}/train/chelsea/cmyk.jpg", quality=90)
    save(variant(src["rocket"], rng, 300, 200), f"{good}/train/rocket/progressive.jpeg", quality=90, progressive=True)
    save(variant(src["astronaut"], rng, 260, 260), f"{good}/train/astronaut/photo.png")
    save(variant(src["astronaut"], rng, 1024, 768), f"{good}/train/astronaut/large.jpg", quality=92)
    save(variant(src["coffee"], rng, 300, 225), f"{good}/train/coffee/nested/deeper.jpg", quality=90)
    with open(f"{good}/train/coffee/notes.txt", "w") as f:
        f.write("not an image: ignored by the index\n")
    # List files: paths relative to good/, labels by class order.
    for split in ("train", "val"):
        with open(f"{root}/{split}_list.txt", "w") as f:
            f.write("# path label\n")
            for c, cls in enumerate(sorted(PHOTOS)):
                for name in sorted(os.listdir(f"{good}/{split}/{cls}")):
                    if name.endswith((".jpg", ".JPEG", ".jpeg", ".png")):
                        f.write(f"{split}/{cls}/{name} {c}\n")
    # Outside the class folders: a transparent PNG and a JPEG with 64 KiB of trailing bytes.
    extra = os.path.join(root, "extra")
    os.makedirs(extra, exist_ok=True)
    rgba = variant(src["coffee"], rng, 120, 90).convert("RGBA")
    alpha = Image.new("L", rgba.size, 255)
    alpha.paste(0, (20, 10, 80, 60))  # a fully transparent hole
    rgba.putalpha(alpha)
    rgba.save(f"{extra}/alpha.png")
    save(variant(src["rocket"], rng, 200, 150), f"{extra}/trailing.jpg", quality=90)
    with open(f"{extra}/trailing.jpg", "ab") as f:
        f.write(bytes(range(256)) * 256)  # no FF D9 in it
    # Bad files beside good ones.
    bad = os.path.join(root, "bad")
    for split in ("train", "val"):
        for cls in ("chelsea", "rocket"):
            for i in range(3):
                save(variant(src[cls], rng, 300, 225), f"{bad}/{split}/{cls}/{cls}_{i}.jpg", quality=90)
    full = open(f"{bad}/train/rocket/rocket_0.jpg", "rb").read()
    open(f"{bad}/train/rocket/truncated.jpg", "wb").write(full[: len(full) * 2 // 3])
    corrupt = bytearray(full)
    corrupt[20:400] = bytes(range(256)) + bytes(124)  # start of image kept, header segments destroyed
    open(f"{bad}/train/chelsea/corrupt.jpg", "wb").write(corrupt)
    open(f"{bad}/train/chelsea/empty.jpg", "wb").close()
    variant(src["chelsea"], rng, 64, 48).save(f"{bad}/train/chelsea/bitmap.bmp")
    # Pillow's own crop + bilinear resize of fixed boxes: the reference for the decoder.
    ref = os.path.join(root, "reference")
    os.makedirs(ref, exist_ok=True)
    cases = []
    for k, (path, box, size) in enumerate([
        (f"{good}/train/coffee/coffee_0.jpg", None, None),               # identity: full image
        (f"{good}/train/rocket/rocket_1.jpg", (17, 9, 251, 203), 224),   # crop + downscale
        (f"{good}/train/chelsea/chelsea_2.jpg", (40, 30, 140, 110), 224),  # crop + upscale
        (f"{good}/train/astronaut/photo.png", (0, 0, 260, 260), 100),     # PNG
        (f"{root}/extra/alpha.png", None, None),                          # RGBA: alpha dropped
    ]):
        img = Image.open(path).convert("RGB")
        if box is None:
            out = img
            box = (0, 0) + img.size
        else:
            out = img.crop(box).resize((size, size), Image.BILINEAR)
        open(f"{ref}/case{k}.bin", "wb").write(out.tobytes())
        cases.append({"path": path, "box": list(box), "width": out.size[0], "height": out.size[1],
                      "file": f"{ref}/case{k}.bin"})
    with open(f"{ref}/cases.json", "w") as f:
        json.dump(cases, f, indent=1)


def make_bench(root, n):
    rng = random.Random(2026)
    src = photos()
    classes = [f"n{c:08d}" for c in range(10)]
    for split, count in (("train", n), ("val", max(n // 10, 10))):
        for i in range(count):
            cls = classes[i % len(classes)]
            img = src[PHOTOS[i % len(PHOTOS)]]
            w, h = rng.choice([(500, 375), (500, 333), (375, 500), (500, 400), (640, 480), (500, 500)])
            out = variant(img, rng, w, h)
            if rng.random() < 0.5:
                out = out.transpose(Image.FLIP_LEFT_RIGHT)
            save(out, f"{root}/{split}/{cls}/{split}_{i:06d}.JPEG", quality=90)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "test":
        make_test(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "bench":
        make_bench(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
