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
echo "== go: kernels, GEMM, NCCL world 1 (gpucheck.test)"
./gpucheck.test -test.v -test.count=1 -test.timeout=8m 2>&1 | tee results.txt || status=1
grep -E '^(--- FAIL|FAIL|ok|PASS)' results.txt | tail -20
echo "== PyTorch on the same GPU (torch_bench.py)"
if [ -n "${py:-}" ] && "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  "$py" torch_bench.py | tee torch.jsonl || status=1
else
  echo "PyTorch with CUDA not found: skipping the PyTorch comparison"
fi
grep '"bench"' results.txt > gp.jsonl 2>/dev/null || true
exit $status
