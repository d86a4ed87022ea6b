"""PyTorch side of the GPU check, run by run.sh: the same GEMMs as gpucheck's
TestGemmThroughput, and training images/s of the models run.sh trains with our trainer, at the
same image size, batch and autocast modes, one JSON line each:

    {"bench": "train", "impl": "torch", "arch": "resnet50", "image": 224, "batch": 64,
     "amp": "off", "images_per_s": 1234.5, "steps": 20, "warmup": 5}

amp "off" is strict float32 (TF32 off for cuDNN and cuBLAS: what our float32 computes);
"tf32" is PyTorch's default for convolutions (cudnn.allow_tf32) and has no counterpart of
ours; "bf16"/"fp16" are torch.autocast (fp16 with a GradScaler). The optimizer is the
trainer's recipe: SGD with momentum 0.9 for ResNets, AdamW for Swin. Inputs are random
tensors already on the device, so no data loading is timed (our trainer's img/s includes its
loader: see run.sh).

    python3 torch_bench.py --models resnet50:224:64,swin_t:224:64 --amp off,bf16 [--device cuda]
"""
import argparse
import json
import time

import torch


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench_gemm(size=4096, iters=20):
    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x, y = a.to(dt), b.to(dt)
        for _ in range(3):
            x @ y
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            x @ y
        torch.cuda.synchronize()
        el = time.perf_counter() - t
        print(json.dumps({"bench": "gemm", "impl": "torch", "size": size, "dtype": str(dt).split(".")[1],
                          "tflops": round(2 * size**3 * iters / el / 1e12, 2)}), flush=True)


def grad_scaler(enabled):
    """torch.amp.GradScaler("cuda"), the current API (torch 2.3 and newer); older torches
    have only torch.cuda.amp.GradScaler, which newer ones deprecate."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def bench_train(arch, image, batch, amp, steps, warmup, device, classes=1000):
    import torchvision
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = amp == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = amp == "tf32"
    model = getattr(torchvision.models, arch)(num_classes=classes).to(device).train()
    if arch.startswith("swin"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    autocast = amp in ("bf16", "fp16")
    dtype = torch.float16 if amp == "fp16" else torch.bfloat16
    scaler = grad_scaler(enabled=amp == "fp16" and device.startswith("cuda"))
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, classes, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.split(":")[0], dtype=dtype, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    sync(device)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    el = time.perf_counter() - t
    return round(batch * steps / el, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50:224:64,swin_t:224:64", help="ARCH:IMAGE:BATCH,...")
    ap.add_argument("--amp", default="off,tf32,bf16", help="off,tf32,bf16,fp16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gemm", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args()
    info = {"torch": torch.__version__, "device": a.device,
            "grad_scaler": "torch.amp" if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") else "torch.cuda.amp"}
    if a.device.startswith("cuda"):
        info.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    print(json.dumps(info), flush=True)
    if a.gemm and a.device.startswith("cuda"):
        bench_gemm()
    for spec in a.models.split(","):
        arch, image, batch = spec.split(":")
        for amp in a.amp.split(","):
            row = {"bench": "train", "impl": "torch", "arch": arch, "image": int(image), "batch": int(batch), "amp": amp,
                   "steps": a.steps, "warmup": a.warmup}
            try:
                row["images_per_s"] = bench_train(arch, int(image), int(batch), amp, a.steps, a.warmup, a.device)
            except Exception as e:  # one mode that does not run (memory, an old torchvision) is a row, not the end
                row["error"] = f"{type(e).__name__}: {e}"
            print(json.dumps(row), flush=True)
            if a.device.startswith("cuda"):
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
