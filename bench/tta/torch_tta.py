"""PyTorch's side of bench/tta: the demo's job (Fashion-MNIST, resnet8_s2, the demo's recipe)
written as a PyTorch user writes it, with DDP over gloo on 2 processes.

    /usr/bin/python3 bench/tta/torch_tta.py init  --out DIR            # DIR/init.npz, x.npy, y.npy; prints a JSON line
    /usr/bin/python3 bench/tta/torch_tta.py train --weights DIR/init.npz [--epochs 8 ...]

init writes the model's initial state dict (torchvision's keys, the format the trainer's
-pretrained reads), the first 128 training images (normalised, three channels) and their labels,
and prints the parameter count and the train-mode mean cross-entropy of that batch: bench/tta
checks both against ours. train prints one JSON line per epoch (test top-1 over all 10,000 test
images, seconds since training started) and a last line with the totals.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # data.FashionMNISTMean, FashionMNISTStd


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(root, train):
    prefix = "train" if train else "t10k"
    def find(kind):
        for name in (f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte", ):
            for ext in ("", ".gz"):
                p = os.path.join(root, name + ext)
                if os.path.exists(p):
                    return p
        raise FileNotFoundError(f"{prefix}-{kind} under {root}")
    x = read_idx(find("images")).astype(np.float32) / 255.0
    y = read_idx(find("labels")).astype(np.int64)
    x = (x - MEAN) / STD
    x = np.repeat(x[:, None, :, :], 3, axis=1)  # Grayscale(3)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idt = x if self.downsample is None else self.downsample(x)
        return F.relu(out + idt)


class CIFARResNet(nn.Module):
    """He et al.'s CIFAR ResNet with torchvision's names (models/resnet/cifar.go)."""

    def __init__(self, blocks=1, widths=(16, 32, 64), stem_stride=2, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, stem_stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        cin = widths[0]
        for i, (w, s) in enumerate(zip(widths, (1, 2, 2))):
            layer = []
            for b in range(blocks):
                layer.append(BasicBlock(cin, w, s if b == 0 else 1))
                cin = w
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():  # torchvision ResNet's init
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def init(args):
    torch.manual_seed(args.seed)
    m = CIFARResNet()
    os.makedirs(args.out, exist_ok=True)
    np.savez(os.path.join(args.out, "init.npz"), **{k: v.numpy() for k, v in m.state_dict().items()})
    x, y = load_split(args.data, True)
    x, y = x[:128], y[:128]
    np.save(os.path.join(args.out, "x.npy"), x.numpy())
    np.save(os.path.join(args.out, "y.npy"), y.numpy())
    m.train()
    loss = F.cross_entropy(m(x), y)
    print(json.dumps({"params": sum(p.numel() for p in m.parameters()), "first_loss": loss.item(),
                      "torch": torch.__version__}))


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    xtr, ytr = load_split(args.data, True)
    xte, yte = load_split(args.data, False)
    m = CIFARResNet()
    state = np.load(args.weights)
    m.load_state_dict({k: torch.from_numpy(state[k]) for k in state.files}, strict=True)
    model = nn.parallel.DistributedDataParallel(m)
    decay = [p for n, p in m.named_parameters() if p.ndim > 1]  # conv and fc weights
    no_decay = [p for n, p in m.named_parameters() if p.ndim <= 1]  # BatchNorm and biases
    opt = torch.optim.SGD([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=0.9)
    per = args.batch // args.world
    steps = len(xtr) // args.batch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * steps)
    crit = nn.CrossEntropyLoss(label_smoothing=args.smoothing)
    g = torch.Generator()
    t0 = time.time()
    best = 0.0
    for epoch in range(args.epochs):
        model.train()
        g.manual_seed(args.seed + epoch)
        perm = torch.randperm(len(xtr), generator=g)[:steps * args.batch]
        mine = perm[rank::args.world]  # DistributedSampler's interleaving
        for s in range(steps):
            idx = mine[s * per:(s + 1) * per]
            xb, yb = xtr[idx], ytr[idx]
            flip = torch.rand(per) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            opt.zero_grad(set_to_none=True)
            crit(model(xb), yb).backward()
            opt.step()
            sched.step()
        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad():
            for lo in range(rank * 5000, (rank + 1) * 5000, 500):
                out = model(xte[lo:lo + 500])
                correct[0] += (out.argmax(1) == yte[lo:lo + 500]).sum()
                correct[1] += 500
        dist.all_reduce(correct)
        top1 = 100.0 * (correct[0] / correct[1]).item()
        best = max(best, top1)
        if rank == 0:
            print(json.dumps({"epoch": epoch, "top1": top1, "elapsed_s": time.time() - t0}), flush=True)
    if rank == 0:
        print(json.dumps({"done": True, "best_top1": best, "elapsed_s": time.time() - t0}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["init", "train"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default="")
    p.add_argument("--weights", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--smoothing", type=float, default=0.1)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    if args.mode == "init":
        init(args)
        return
    os.environ["MASTER_PORT"] = str(args.port)
    mp.spawn(worker, args=(args,), nprocs=args.world)


if __name__ == "__main__":
    main()
