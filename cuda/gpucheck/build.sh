#!/usr/bin/env bash
# Builds the GPU check into one folder that runs on a GPU machine without Go:
#   bash cuda/gpucheck/build.sh [DIR]      (default DIR: build/gpu-check)
# then copy DIR to the GPU machine and run DIR/run.sh A, then DIR/run.sh B, there. With EMULATE=1 it also builds
# cuda/cudatest's fake GPU libraries and the kernel emulator into OUT/emulator, for
# `EMULATE=1 OUT/run.sh` on a machine without a GPU.
#
# The binaries (gpucheck.test, tape.test, and the trainer imagenet) are built with cgo (the
# GPU libraries are opened with dlopen) and, where the static archives are installed
# (libopenblas-dev, libjpeg-dev), link OpenBLAS and libjpeg statically, so that they need
# only glibc and the CPU references run at OpenBLAS's speed; without them the test binaries
# fall back to -tags purego (gonum's Go BLAS) and the trainer needs the shared libraries ldd
# lists in BUILD_INFO. They are stripped and gzipped (run.sh unpacks them): the folder must
# stay small enough to carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/gpu-check}
go=${GO:-go}
cc=${CC:-cc}
mkdir -p "$out"
# A fresh folder: the binaries, and what an earlier run.sh left (its runs, logs, generated data
# and results), which would otherwise travel with it.
rm -rf "$out"/*.test "$out"/imagenet "$out"/*.gz "$out"/runs "$out"/logs "$out"/data "$out"/emulator "$out"/out \
  "$out"/*.txt "$out"/*.jsonl "$out"/*.ptx "$out"/PTX_PENDING
static=$(mktemp -d)
trap 'rm -rf "$static"' EXIT
tags=()
ldflags="-s -w"
blas=$("$cc" -print-file-name=libopenblas.a 2>/dev/null || true)
jpeg=$("$cc" -print-file-name=libjpeg.a 2>/dev/null || true)
if [ -f "$blas" ] && [ -f "$jpeg" ]; then
  # A folder holding only the archives, searched first: -lopenblas and -ljpeg resolve to them.
  ln -s "$(readlink -f "$blas")" "$static/libopenblas.a"
  ln -s "$(readlink -f "$jpeg")" "$static/libjpeg.a"
  export CGO_LDFLAGS="${CGO_LDFLAGS:+$CGO_LDFLAGS }-L$static"
  ldflags="$ldflags -extldflags=-lm"
  linking="OpenBLAS and libjpeg linked statically"
else
  tags=(-tags purego)
  linking="no static OpenBLAS/libjpeg archives: purego (gonum's BLAS); the trainer links the shared libraries"
fi
echo "gpu-check: building into $out ($linking)"
CGO_ENABLED=1 "$go" test -c "${tags[@]}" -ldflags="$ldflags" -o "$out/gpucheck.test" ./cuda/gpucheck
# The graph executor's tests (cuda/tape): on the emulator here, on the real GPU with REQUIRE_GPU=1.
CGO_ENABLED=1 "$go" test -c "${tags[@]}" -ldflags="$ldflags" -o "$out/tape.test" ./cuda/tape
# The trainer (examples/imagenet), whose runs run.sh times and compares with the CPU. It keeps
# libjpeg (the data loader's decoder) even under purego, hence no tags.
if [ ${#tags[@]} -eq 0 ]; then
  CGO_ENABLED=1 "$go" build -ldflags="$ldflags" -o "$out/imagenet" ./examples/imagenet
else
  CGO_ENABLED=1 "$go" build -ldflags="-s -w" -o "$out/imagenet" ./examples/imagenet
fi
cp cuda/gpucheck/run.sh cuda/gpucheck/torch_bench.py cuda/gpucheck/compare.py cuda/gpucheck/README.md "$out/"
# kernels.cu, from which run.sh builds the PTX for the GPU it runs on with nvcc (every step
# loads it through $GP_CUDA_PTX), and the PTX the binaries embed (run.sh's fallback where
# there is no nvcc).
cp cuda/kernels/kernels.cu "$out/"
cp cuda/kernels/kernels.ptx "$out/kernels.embedded.ptx"
chmod +x "$out/run.sh" "$out/gpucheck.test" "$out/tape.test" "$out/imagenet"
{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)') with $("$go" version); $linking"
  echo "built on glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  echo "needs glibc >= $(objdump -T "$out/gpucheck.test" "$out/tape.test" "$out/imagenet" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 || echo '?')"
  for b in gpucheck.test tape.test imagenet; do
    echo "$b needs: $(ldd "$out/$b" 2>/dev/null | awk '/=>/ {print $1} !/=>/ && /\// {print $1}' | tr '\n' ' ')"
  done
} > "$out/BUILD_INFO"
cat "$out/BUILD_INFO"
for b in gpucheck.test tape.test imagenet; do
  gzip -f -6 "$out/$b"
done
if [ "${EMULATE:-0}" = 1 ]; then
  CGO_ENABLED=1 "$go" run ./cuda/gpucheck/fakelibs "$out/emulator"
  echo "gpu-check: fake GPU libraries and the kernel emulator in $out/emulator (EMULATE=1 $out/run.sh)"
fi
echo "gpu-check: $out ready ($(du -sh "$out" | cut -f1)); on the GPU machine run: OUT=... $out/run.sh A, then B"
