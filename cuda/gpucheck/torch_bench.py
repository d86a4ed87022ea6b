"""PyTorch side of the GPU check: the same GEMMs as gpucheck's TestGemmThroughput, and
training images/s (forward, backward, SGD with momentum) of torchvision's resnet50 at
224x224, batch 64: strict float32, float32 with TF32 convolutions (PyTorch's default) and
autocast fp16/bf16, one JSON line each. Run by run.sh; no arguments."""
import json
import time

import torch


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


def bench_resnet50(batch=64, steps=20, warmup=5):
    try:
        import torchvision
    except ImportError:
        print(json.dumps({"bench": "resnet50", "impl": "torch", "error": "torchvision not installed"}))
        return
    torch.backends.cudnn.benchmark = True
    # "float32" is strict float32 (TF32 off), what gp's float32 computes; "float32-tf32" is
    # PyTorch's default for convolutions (cudnn.allow_tf32=True).
    for mode in ("float32", "float32-tf32", "autocast-fp16", "autocast-bf16"):
        torch.backends.cudnn.allow_tf32 = mode == "float32-tf32"
        torch.backends.cuda.matmul.allow_tf32 = False
        model = torchvision.models.resnet50().cuda().train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scaler = torch.amp.GradScaler("cuda", enabled=mode == "autocast-fp16")
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        dtype = torch.float16 if mode.endswith("fp16") else torch.bfloat16

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype, enabled=mode.startswith("autocast")):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        el = time.perf_counter() - t
        print(json.dumps({"bench": "resnet50", "impl": "torch", "mode": mode, "batch": batch, "image": 224,
                          "images_per_s": round(batch * steps / el, 1),
                          "tf32": torch.backends.cudnn.allow_tf32}), flush=True)


if __name__ == "__main__":
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
                      "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None}))
    bench_gemm()
    bench_resnet50()
