#!/usr/bin/python3
"""torchvision side of `make bench-data`: ImageFolder + DataLoader (PIL) images/s.

Usage: /usr/bin/python3 bench/data/torchvision_bench.py ROOT WORKERS BATCH SIZE
Prints one JSON line {"workers": W, "imgs_per_s": R, "images": N}. One warm-up epoch (worker start
and page cache), then one timed epoch, with persistent workers, as the Go side does.
"""
import json, sys, time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, workers, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(root, tf)
    dl = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    for _ in dl:
        pass
    n, t0 = 0, time.perf_counter()
    for x, y in dl:
        n += x.shape[0]
    dt = time.perf_counter() - t0
    print(json.dumps({"workers": workers, "imgs_per_s": n / dt, "images": n}))


if __name__ == "__main__":
    main()
