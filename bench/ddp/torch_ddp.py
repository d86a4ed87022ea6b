"""PyTorch side of `make bench-ddp`: torchvision resnet18, SGD-momentum training steps on a
fixed synthetic batch, one thread per process, timed exactly like the Go side.

    python3 torch_ddp.py --mode plain            # one process, no DDP
    RANK=.. WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=.. python3 torch_ddp.py --mode ddp

Prints one JSON line: {"rank", "seconds", "imgs"} for the timed steps.
"""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
import torch.distributed as dist
from torchvision.models import resnet18


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["plain", "ddp"], required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank = 0
    model = resnet18(num_classes=1000)
    if a.mode == "ddp":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)  # 25 MiB buckets, 1 MiB first
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, 3, a.size, a.size, generator=g)
    y = torch.randint(0, 1000, (a.batch,), generator=g)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    if a.mode == "ddp":
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - t0
    print(json.dumps({"rank": rank, "seconds": secs, "imgs": a.batch * a.steps}), flush=True)
    if a.mode == "ddp":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
