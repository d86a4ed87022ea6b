#!/usr/bin/python3
"""Regenerates data/testdata fixtures with Debian's PIL 9.4, torch 1.13.1 and torchvision 0.14.1.

Run from the repository root:  /usr/bin/python3 data/testdata/make_fixtures.py
Writes small source images under data/testdata/img/ and the expected values in fixtures.json:
  decode:   PIL Image.open(f).convert("RGB") bytes (hex) for every colour model we convert
  resize:   torchvision.transforms.functional on PIL for fixed crop/resize/flip parameters, as
            uint8 HWC (hex) before ToTensor, plus one normalized float32 case
  sampler:  torch.utils.data.DistributedSampler(shuffle=False) indices for many (n, world, drop_last)
"""
import io, json, os, struct
import numpy as np
from PIL import Image
import torch
import torchvision.transforms.functional as F
from torch.utils.data import DistributedSampler

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)))
IMG = os.path.join(OUT, "img")
os.makedirs(IMG, exist_ok=True)
rng = np.random.default_rng(7)


def smooth(h, w, c):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1)[..., :c]
    noise = rng.integers(0, 40, size=(h, w, c))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


rgb = smooth(29, 37, 3)
src = Image.fromarray(rgb, "RGB")
src.save(os.path.join(IMG, "src.png"))

files = {}
files["rgb420.jpg"] = lambda p: src.save(p, quality=90)
files["rgb444.jpg"] = lambda p: src.save(p, quality=95, subsampling=0)
files["gray.jpg"] = lambda p: src.convert("L").save(p, quality=90)
files["cmyk.jpg"] = lambda p: src.convert("CMYK").save(p, quality=95)
files["pal.png"] = lambda p: src.convert("P", palette=Image.ADAPTIVE, colors=16).save(p, transparency=3)
files["rgba.png"] = lambda p: Image.fromarray(np.dstack([rgb, rng.integers(0, 256, rgb.shape[:2]).astype(np.uint8)]), "RGBA").save(p)
files["la.png"] = lambda p: src.convert("LA").save(p)
files["gray.png"] = lambda p: src.convert("L").save(p)


def gray16(p):
    a = (rng.integers(0, 1024, size=(9, 11))).astype(np.uint16)
    Image.fromarray(a.astype(np.int32), "I").save(p)  # PNG writer stores mode I as 16-bit gray


files["gray16.png"] = gray16


def rgb16(p):
    # PIL cannot write 16-bit RGB PNGs; write one by hand.
    import zlib
    h, w = 5, 6
    a = rng.integers(0, 65536, size=(h, w, 3)).astype(">u2")
    raw = b"".join(b"\x00" + a[y].tobytes() for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(p, "wb").write(png)


files["rgb16.png"] = rgb16
files["rgb.ppm"] = lambda p: src.save(p)
files["gray.pgm"] = lambda p: src.convert("L").save(p)
files["rgb.bmp"] = lambda p: src.save(p)
files["pal.bmp"] = lambda p: src.convert("P", palette=Image.ADAPTIVE, colors=16).save(p)
files["rgb.tif"] = lambda p: src.save(p)
files["lossless.webp"] = lambda p: src.save(p, lossless=True)

decode = {}
for name, make in files.items():
    path = os.path.join(IMG, name)
    make(path)
    im = Image.open(path)
    out = im.convert("RGB")
    decode[name] = {"mode": im.mode, "w": out.width, "h": out.height, "rgb": out.tobytes().hex()}

# Resize/crop cases on src (37x29): (top, left, h, w) crop, output (w, h), flip.
resize = []
cases = [
    ("rrc_down", (3, 4, 20, 25), (16, 16), False),
    ("rrc_up", (5, 2, 9, 7), (16, 16), False),
    ("rrc_flip", (0, 0, 29, 37), (12, 10), True),
    ("rrc_aspect", (2, 10, 27, 13), (8, 20), False),
]
for name, (i, j, h, w), (ow, oh), flip in cases:
    im = F.resized_crop(src, i, j, h, w, [oh, ow], interpolation=F.InterpolationMode.BILINEAR)
    if flip:
        im = F.hflip(im)
    resize.append({"name": name, "crop": [i, j, h, w], "out": [ow, oh], "flip": flip, "rgb": im.tobytes().hex()})
# Eval path: Resize(20) (shorter side) then CenterCrop(17), and CenterCrop larger than the image.
im = F.center_crop(F.resize(src, 20, interpolation=F.InterpolationMode.BILINEAR), [17, 17])
resize.append({"name": "resize_center", "resize": 20, "center": 17, "rgb": im.tobytes().hex()})
im = F.center_crop(src, [32, 40])
resize.append({"name": "center_pad", "resize": 0, "center_hw": [32, 40], "rgb": im.tobytes().hex()})
t = F.normalize(F.to_tensor(F.resized_crop(src, 3, 4, 20, 25, [16, 16])), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
normalized = {"crop": [3, 4, 20, 25], "out": [16, 16], "f32": t.numpy().astype("<f4").tobytes().hex()}


class Fake:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


sampler = []
for n in [1, 2, 5, 7, 10, 13, 16]:
    for world in [1, 2, 3, 4, 8]:
        for drop_last in [False, True]:
            per_rank = []
            for rank in range(world):
                s = DistributedSampler(Fake(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
                per_rank.append(list(s))
            sampler.append({"n": n, "world": world, "drop_last": drop_last, "indices": per_rank})

with open(os.path.join(OUT, "fixtures.json"), "w") as f:
    json.dump({"versions": {"torch": torch.__version__, "pil": Image.__version__},
               "decode": decode, "resize": resize, "normalized": normalized, "sampler": sampler}, f, indent=0)
print("wrote", os.path.join(OUT, "fixtures.json"))
