#!/usr/bin/env bash
# Runs the GPU check on a machine with an NVIDIA GPU (no Go needed). Every GPU test fails
# instead of skipping (REQUIRE_GPU=1). Libraries are found through LD_LIBRARY_PATH, the
# driver's libcuda, and PyTorch's pip wheels (site-packages/nvidia/*/lib); point GPU_LIB_DIRS
# or CUDA_DRIVER_LIBRARY/CUBLAS_LIBRARY/NCCL_LIBRARY at others. Output: stdout and
# results.txt / torch.jsonl in this folder.
set -uo pipefail
cd "$(dirname "$0")"
export REQUIRE_GPU=1
cat BUILD_INFO 2>/dev/null
ldd --version 2>/dev/null | head -1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi not found"
# PyTorch's wheels: add their library folders (the Go side also searches them).
if py=$(command -v python3); then
  extra=$("$py" - <<'PY' 2>/dev/null
import glob, os, site
dirs = []
for s in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += glob.glob(os.path.join(s, "nvidia", "*", "lib")) + glob.glob(os.path.join(s, "nvidia", "cu*", "lib"))
print(":".join(dirs))
PY
)
  [ -n "$extra" ] && export GPU_LIB_DIRS="${GPU_LIB_DIRS:+$GPU_LIB_DIRS:}$extra"
fi
status=0
echo "== go: kernels, GEMM, ResNet and Swin steps, NCCL world 1 (gpucheck.test)"
./gpucheck.test -test.v -test.count=1 -test.timeout=8m 2>&1 | tee results.txt || status=1
grep -E '^(--- FAIL|FAIL|ok|PASS)' results.txt | tail -20
echo "== PyTorch on the same GPU (torch_bench.py)"
if [ -n "${py:-}" ] && "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  "$py" torch_bench.py | tee torch.jsonl || status=1
else
  echo "PyTorch with CUDA not found: skipping the PyTorch comparison"
fi
grep '^{"bench"' results.txt > gp.jsonl 2>/dev/null || true
if [ -n "${py:-}" ] && [ -s torch.jsonl ]; then
  echo "== side by side (same GPU)"
  "$py" - <<'PY'
import json
def load(p):
    out = {}
    for line in open(p):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "bench" not in r:
            continue
        key = (r["bench"], r.get("dtype") or r.get("mode"))
        out[key] = r.get("tflops") or r.get("images_per_s")
    return out
gp, th = load("gp.jsonl"), load("torch.jsonl")
print(f"{'bench':10} {'dtype/mode':16} {'gp':>10} {'torch':>10} {'gp/torch':>9}   (gemm: TFLOP/s, resnet50: images/s)")
for k in sorted(set(gp) | set(th)):
    a, b = gp.get(k), th.get(k)
    ratio = f"{a / b:.2f}" if a and b else "-"
    print(f"{k[0]:10} {k[1]:16} {a or '-':>10} {b or '-':>10} {ratio:>9}")
PY
fi
exit $status
