#!/usr/bin/env bash
# Compiles kernels.cu with clang's NVPTX backend (Debian: apt-get install clang), without the
# CUDA toolkit: clang/ stands in for its headers (nvptx.h: the 16-bit types, atomics and the
# float math, as there is no libdevice). A compile check of kernels.cu where there is no nvcc,
# and a PTX with every kernel for machines without nvcc; on a GPU run, gpucheck's run.sh builds
# the PTX with nvcc for the device and uses that instead.
#
#   bash cuda/kernels/clang-ptx.sh            # check: compile, every kernel an entry point, the math's accuracy
#   bash cuda/kernels/clang-ptx.sh FILE       # the same, and write the PTX to FILE (kernels.ptx: the embedded one)
#
# ARCH (default sm_80, as go generate's compute_80; clang 14 knows none newer) picks the target.
# Exit status 0 when clang is not installed (it says so): the check is skipped, not failed.
set -euo pipefail
dest=${1:+$(realpath -m "$1")}
cd "$(dirname "$0")"
clang=${CLANG:-clang}
if ! command -v "$clang" >/dev/null 2>&1; then
  echo "clang-ptx: $clang not found: the clang compile check of kernels.cu is skipped (Debian: apt-get install clang)"
  exit 0
fi
arch=${ARCH:-sm_80}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$clang" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch="$arch" -O3 -I clang -S -o "$tmp/k.ptx" kernels.cu
want=$(grep -oP '__global__ void \K\w+' kernels.cu | sort)
have=$(grep -oP '^\.visible \.entry \K\w+' "$tmp/k.ptx" | sort)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
if [ -n "$missing" ]; then
  echo "clang-ptx: the PTX lacks entry points for: $(echo $missing)"; exit 1
fi
# Functions the PTX calls but does not define (a math function nvptx.h lacks) would fail at load.
if grep -q '^\.extern \.func' "$tmp/k.ptx"; then
  echo "clang-ptx: the PTX calls undefined functions:"; grep '^\.extern \.func' "$tmp/k.ptx"; exit 1
fi
"${CXX:-clang++}" -O2 -std=c++17 -o "$tmp/mathcheck" clang/mathcheck.cc -lm
"$tmp/mathcheck"
{
  echo "// kernels.cu compiled by cuda/kernels/clang-ptx.sh ($("$clang" --version | head -1), $arch);"
  echo "// \`go generate ./cuda/kernels\` (nvcc) replaces it."
  cat "$tmp/k.ptx"
} > "$tmp/out.ptx"
echo "clang-ptx: kernels.cu compiles for $arch: $(echo "$have" | wc -l) entry points, every kernel of kernels.cu ($(wc -l < "$tmp/out.ptx") lines of PTX)"
if [ -n "$dest" ]; then
  cp "$tmp/out.ptx" "$dest"
  echo "clang-ptx: wrote $dest"
fi
