"""PyTorch side of bench/ddp and bench/ddpnet: torchvision resnet18, SGD-momentum training
steps on a fixed synthetic batch, one thread per process, timed exactly like the Go side,
optionally with a DDP communication hook from torch.distributed.algorithms.ddp_comm_hooks:

    --hook none       no hook (DDP's averaging all-reduce)
    --hook fp16       default_hooks.fp16_compress_hook
    --hook bf16       default_hooks.bf16_compress_hook
    --hook powersgd   powerSGD_hook.powerSGD_hook with
                      PowerSGDState(matrix_approximation_rank=--powersgd-rank,
                      start_powerSGD_iter=--powersgd-start), error feedback and warm start on

    python3 torch_ddp.py --mode plain
    RANK=.. WORLD_SIZE=2 MASTER_ADDR=.. MASTER_PORT=.. python3 torch_ddp.py --mode ddp --hook fp16

Prints one JSON line: {"rank", "seconds", "imgs"} for the timed steps. A hook that fails
(for example a dtype gloo cannot reduce) fails the process with the error on stderr.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
import torch.distributed as dist
from torchvision.models import resnet18


def register(model, a):
    if a.hook == "none":
        return None
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    if a.hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif a.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    else:
        raise SystemExit("unknown hook " + a.hook)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["plain", "ddp"], required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--hook", default="none", choices=["none", "fp16", "bf16", "powersgd"])
    ap.add_argument("--powersgd-rank", type=int, default=1)
    ap.add_argument("--powersgd-start", type=int, default=2)
    ap.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP bucket_cap_mb (torch's default 25)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank = 0
    model = resnet18(num_classes=1000)
    if a.mode == "ddp":
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_cap_mb)  # 1 MiB first
        register(model, a)
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
