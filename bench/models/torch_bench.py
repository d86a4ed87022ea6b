#!/usr/bin/python3
"""PyTorch side of `make bench-models`: training images/s of a torchvision model on the
inputs the Go side wrote. Usage: torch_bench.py ARCH THREADS X.npy Y.npy WARMUP STEPS [MIN_SECONDS [serve]]
(a window times at least STEPS steps and at least MIN_SECONDS, as the Go side).
Prints images per second (forward, backward, SGD step, as the Go side) and CPU seconds per
step (user+system, every thread: time.process_time). With serve, as the Go side's -serve:
prints "ready" after the warm-up, then answers each line of stdin with one untimed step and
one timed window, until the end of stdin."""
import sys
import time

import numpy as np
import torch
import torchvision

arch, threads, xp, yp, warmup, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
min_seconds = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
serve = len(sys.argv) > 8 and sys.argv[8] == "serve"
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


def window():
    t, c = time.perf_counter(), time.process_time()
    done = 0
    while done < steps or time.perf_counter() - t < min_seconds:
        step()
        done += 1
    print(x.shape[0] * done / (time.perf_counter() - t), (time.process_time() - c) / done, flush=True)


for _ in range(warmup):
    step()
if serve:
    print("ready", flush=True)
    for _ in sys.stdin:
        step()
        window()
else:
    window()
