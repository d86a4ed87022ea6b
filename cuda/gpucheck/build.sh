#!/usr/bin/env bash
# Builds the GPU check into one folder that runs on a GPU machine without Go:
#   bash cuda/gpucheck/build.sh [OUT]      (default OUT: build/gpu-check)
# then copy OUT to the GPU machine and run OUT/run.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/gpu-check}
go=${GO:-go}
mkdir -p "$out"
# cgo is required: the GPU libraries are opened with dlopen.
# purego: gonum's Go BLAS for the CPU references, so the binary needs only libc.
CGO_ENABLED=1 "$go" test -c -tags purego -o "$out/gpucheck.test" ./cuda/gpucheck
# The graph executor's tests (cuda/tape): on the emulator here, on the real GPU with REQUIRE_GPU=1.
CGO_ENABLED=1 "$go" test -c -tags purego -o "$out/tape.test" ./cuda/tape
cp cuda/gpucheck/run.sh cuda/gpucheck/torch_bench.py cuda/gpucheck/README.md "$out/"
# kernels.cu, so that run.sh can regenerate the PTX where nvcc is (the binaries embed the
# committed PTX), and the kernels the committed PTX lacks (cuda/kernels' Pending), one a line.
cp cuda/kernels/kernels.cu "$out/"
sed -n '/^var Pending = /,/}/p' cuda/kernels/kernels.go | grep -o '"[A-Za-z0-9_]*"' | tr -d '"' > "$out/PTX_PENDING" || true
chmod +x "$out/run.sh" "$out/gpucheck.test" "$out/tape.test"
{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown) with $("$go" version)"
  echo "needs glibc >= $(objdump -T "$out/gpucheck.test" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 || echo '?')"
} > "$out/BUILD_INFO"
echo "gpu-check: $out ready; on the GPU machine run: $out/run.sh"
