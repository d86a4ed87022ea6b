#!/usr/bin/python3
"""PyTorch side of `make bench-models`: training images/s of a torchvision model on the
inputs the Go side wrote. Usage: torch_bench.py ARCH THREADS X.npy Y.npy WARMUP STEPS.
Prints images per second (forward, backward, SGD step, as the Go side) and CPU seconds per
step (user+system, every thread: time.process_time)."""
import sys
import time

import numpy as np
import torch
import torchvision

arch, threads, xp, yp, warmup, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
torch.manual_seed(0)
x = torch.from_numpy(np.load(xp))
y = torch.from_numpy(np.load(yp)).long()
m = getattr(torchvision.models, arch)(num_classes=1000)
m.train()
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()


def step():
    opt.zero_grad()
    loss_fn(m(x), y).backward()
    opt.step()


for _ in range(warmup):
    step()
t, c = time.perf_counter(), time.process_time()
for _ in range(steps):
    step()
print(x.shape[0] * steps / (time.perf_counter() - t), (time.process_time() - c) / steps)
