#!/usr/bin/env bash
# Runs the GPU check on a machine with an NVIDIA GPU (no Go needed). Every GPU test fails
# instead of skipping (REQUIRE_GPU=1). Libraries are found through LD_LIBRARY_PATH, the
# driver's libcuda, and PyTorch's pip wheels (site-packages/nvidia/*/lib); point GPU_LIB_DIRS
# or CUDA_DRIVER_LIBRARY/CUBLAS_LIBRARY/NCCL_LIBRARY at others. Output: stdout and
# results.txt / tape.txt / torch.jsonl in this folder.
set -uo pipefail
cd "$(dirname "$0")"
export REQUIRE_GPU=1
cat BUILD_INFO 2>/dev/null
ldd --version 2>/dev/null | head -1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi not found"
# The kernels of kernels.cu that the PTX embedded in these binaries lacks (cuda/kernels' Pending,
# written where there was no nvcc). The tape tests that launch them fail naming
# `go generate ./cuda/kernels`; the tape step below reports those as "PTX pending", not as a
# failure of the run. nvcc here can regenerate the PTX, but the binaries embed it: testing it
# needs a rebuild with Go.
pending=$(tr "\n" " " 2>/dev/null < PTX_PENDING)
npending=$(grep -c . PTX_PENDING 2>/dev/null); npending=${npending:-0}
if [ "$npending" -gt 0 ]; then
  echo "note: PTX pending: $npending kernels of kernels.cu are not in the PTX these binaries embed: ${pending% }"
  echo "      the tape tests that use them fail naming 'go generate ./cuda/kernels' and are reported as PTX pending;"
  echo "      to test them: run 'go generate ./cuda/kernels' where nvcc is (or take kernels.ptx made below),"
  echo "      empty Pending in cuda/kernels/kernels.go, rebuild with 'make gpu-check' (needs Go) and run again"
  if command -v nvcc >/dev/null 2>&1 && [ -f kernels.cu ]; then
    # as kernels.go's go:generate line
    if nvcc -arch=compute_80 -ptx -O3 -o kernels.ptx kernels.cu >nvcc.txt 2>&1; then
      have=0
      for k in $pending; do grep -q "^\.visible \.entry $k(" kernels.ptx && have=$((have + 1)); done
      echo "      nvcc: regenerated $(pwd)/kernels.ptx ($have of the $npending pending kernels in it); not used by this run:"
      echo "      the binaries embed the committed PTX; copy it to cuda/kernels/kernels.ptx where Go is"
    else
      echo "      nvcc failed on kernels.cu (nvcc.txt):"; tail -5 nvcc.txt
    fi
  else
    echo "      nvcc not found here: the PTX cannot be regenerated on this machine"
  fi
fi
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
echo "== go: the graph executor on the device (tape.test: every op lowering, the gorgonia MLP, tiny ResNet and Swin vs the CPU)"
./tape.test -test.v -test.count=1 -test.timeout=5m 2>&1 | tee tape.txt
trc=${PIPESTATUS[0]}
grep -E '^( *--- FAIL|FAIL|ok|PASS)' tape.txt | tail -20
# Failed leaf tests, split by whether their output names `go generate ./cuda/kernels`.
read -r tptx tother < <(awk '
/^=== (RUN|CONT|NAME|PAUSE)/ { cur = $3; next }
/go generate \.\/cuda\/kernels/ { ptx[cur] = 1 }
/^ *--- FAIL: / { failed[$3] = 1 }
END {
  for (f in failed) {
    leaf = 1
    for (g in failed) if (index(g, f "/") == 1) leaf = 0
    if (!leaf) continue
    if (f in ptx) p++; else o++
  }
  print p + 0, o + 0
}' tape.txt)
tptx=${tptx:-0} tother=${tother:-0}
if [ "$trc" -eq 0 ]; then
  echo "tape: PASS"
elif [ "$npending" -gt 0 ] && [ "$tptx" -gt 0 ] && [ "$tother" -eq 0 ]; then
  echo "tape: PTX pending: $npending kernels (${pending% }): $tptx tests need them and fail for that alone, all other tests passed"
else
  echo "tape: FAIL ($tother failed tests not explained by the pending PTX, $tptx by it; exit status $trc; see tape.txt)"
  status=1
fi
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
