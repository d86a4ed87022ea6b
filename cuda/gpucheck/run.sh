#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, the driver, nvcc and PyTorch's wheels (no Go):
# run in the folder `make gpu-check` built, in two calls of at most 5 minutes each on the same
# warm machine:
#
#   OUT=/path/out ./run.sh A    # preflight, the PTX built by nvcc for this GPU, gpucheck.test,
#                               # tape.test, and a capped compute-sanitizer memcheck pass
#   OUT=/path/out ./run.sh B    # the trainer's rows on the device and the CPU, PyTorch's same
#                               # rows, and the table
#   ./run.sh                    # A then B
#
# Call A: 1. preflight: glibc against BUILD_INFO, nvidia-smi and the compute capability, the
#   binaries' libraries (ldd), PyTorch's version; the wheels' library folders are on
#   LD_LIBRARY_PATH. 2. nvcc: kernels.ptx for this GPU's compute capability from kernels.cu
#   (and, for committing, kernels.compute_80.ptx as `go generate ./cuda/kernels` makes it);
#   every later step loads it ($GP_CUDA_PTX), so the kernels tested are the ones nvcc just
#   compiled. nvcc failing stops the call; nvcc missing too, unless ALLOW_EMBEDDED_PTX=1 (then
#   the PTX the binaries embed, clang's, is used and the output says so). 3. the libraries:
#   each one's resolved file and version, and the PTX loaded by the driver (gpucheck.test
#   -test.run TestPreflight). A failure of 1-3 stops the call.
#   4. gpucheck.test: every kernel, GEMM and convolution against the CPU, NCCL at world 1,
#   ResNets and Swins trained through cuda/tape against the CPU. 5. tape.test: the graph
#   executor's tests. 6. compute-sanitizer --tool memcheck over the small op tests, where the
#   tool is installed.
# Call B: 7. the trainer (imagenet) on synthetic data: per model of MODELS and amp of AMPS, a
#   CPU reference run (CPU_STEPS steps, -strategy none) for each optimizer the device rows use,
#   then STEPS steps with -device cuda under each of STRATEGIES (ddp at world 1 goes through
#   NCCL; zero3 steps AdamW); 8. torch_bench.py: PyTorch's img/s for the same rows; 9.
#   compare.py: the table (table.txt, table.jsonl).
#
# Everything a call makes (step times in steps.jsonl, logs, results, the table, the PTX) is in
# OUT (default ./out). Each step runs under its own `timeout`; the trainer also gets a short
# collective -timeout. DEADLINE (seconds from the call's start, or a Unix time) stops a call
# cleanly: a step that no longer fits is skipped and listed, and a deadline too short for the
# call's shortest step is said at once with nothing started. NCCL_DEBUG=WARN is set.
# GP_REQUIRE_CUDNN=1 and REQUIRE_GPU=1 are set: cuDNN or a GPU that does not load fails.
#
# Exit status: 0 all passed; 1 a check or a row failed (or losses differ beyond compare.py's
# tolerances); 2 the preflight failed or the deadline left nothing to run; 3 nothing failed but
# the deadline skipped steps.
#
# EMULATE=1 ./run.sh runs the same calls on a machine without a GPU: the fake libraries and
# the CPU emulator of kernels.cu in ./emulator (built by `EMULATE=1 make gpu-check`), tiny
# models, PyTorch on the CPU when it is installed; the PTX is nvcc's where nvcc is, else the
# folder's copy of the embedded one (kernels.embedded.ptx). It proves the script, the binaries
# and the table, not the GPU.
#
# Settings (environment; defaults for the GPU, then for EMULATE=1):
#   OUT         output folder                   ./out
#   DEADLINE    seconds, or a Unix time         none
#   MODELS      ARCH:IMAGE:BATCH ...            "resnet50:224:64 swin_t:224:64" / "resnet18:16:8 swin_t:32:1"
#   STRATEGIES  trainer -strategy               "none ddp zero3"
#   AMPS        off bf16 fp16                   "off bf16"
#   STEPS       device steps per run            12 / 2
#   WARMUP      steps not timed                 3 / 1
#   CPU_STEPS   CPU reference steps             2
#   WORKERS     loader workers                  half the cores, at most 8
#   T_PREFLIGHT T_NVCC T_GPUCHECK T_TAPE T_MEMCHECK T_TRAIN T_TORCH T_TABLE
#               each step's timeout in seconds  30 120 150 75 45 75 120 30 / 60 60 600 300 0 300 300 30
#   TRAIN_TIMEOUT  the trainer's -timeout       60s / 120s
#   GO_TESTS=0  skip steps 4-6; TORCH=0 skip step 8
set -uo pipefail
cd "$(dirname "$0")"
here=$(pwd)
call=${1:-AB}
case $call in A | B | AB) ;; *) echo "usage: $0 [A|B]   (no argument: A then B)"; exit 2 ;; esac
emulate=${EMULATE:-0}
started=$(date +%s)
OUT=${OUT:-$here/out}
mkdir -p "$OUT" || { echo "cannot create OUT=$OUT"; exit 2; }
OUT=$(cd "$OUT" && pwd)
# The console goes to OUT/console-CALL.txt too; fd 3 is the console, for step's own lines.
exec > >(tee -a "$OUT/console-$call.txt") 2>&1
exec 3>&1
export REQUIRE_GPU=1 GP_REQUIRE_CUDNN=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}

if [ "$emulate" = 1 ]; then
  MODELS=${MODELS:-"resnet18:16:8 swin_t:32:1"} STEPS=${STEPS:-2} WARMUP=${WARMUP:-1}
  : "${T_PREFLIGHT:=60}" "${T_NVCC:=60}" "${T_GPUCHECK:=600}" "${T_TAPE:=300}" "${T_MEMCHECK:=0}" "${T_TRAIN:=300}" "${T_TORCH:=300}" "${T_TABLE:=30}"
  TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-120s}
else
  MODELS=${MODELS:-"resnet50:224:64 swin_t:224:64"} STEPS=${STEPS:-12} WARMUP=${WARMUP:-3}
  : "${T_PREFLIGHT:=30}" "${T_NVCC:=120}" "${T_GPUCHECK:=150}" "${T_TAPE:=75}" "${T_MEMCHECK:=45}" "${T_TRAIN:=75}" "${T_TORCH:=120}" "${T_TABLE:=30}"
  TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-60s}
fi
STRATEGIES=${STRATEGIES:-"none ddp zero3"} AMPS=${AMPS:-"off bf16"} CPU_STEPS=${CPU_STEPS:-2}
ncpu=$(nproc 2>/dev/null || echo 2)
WORKERS=${WORKERS:-$(( ncpu / 2 > 8 ? 8 : (ncpu / 2 < 1 ? 1 : ncpu / 2) ))}

# The deadline, as a Unix time (0: none). A value above 10^9 is a Unix time, else seconds.
deadline=0
if [ -n "${DEADLINE:-}" ]; then
  case $DEADLINE in *[!0-9]* | "") echo "DEADLINE=$DEADLINE: want seconds or a Unix time"; exit 2 ;; esac
  if [ "$DEADLINE" -gt 1000000000 ]; then deadline=$DEADLINE; else deadline=$(( started + DEADLINE )); fi
fi
left() { if [ "$deadline" -eq 0 ]; then echo 999999; else echo $(( deadline - $(date +%s) )); fi; }
# The shortest step of each call: the least a call needs to start at all (A: the preflight;
# B: one trainer row, which needs at least a third of its timeout).
min_a=10 min_b=$(( T_TRAIN / 3 ))
case $call in A | AB) need=$min_a ;; B) need=$min_b ;; esac
if [ "$(left)" -lt "$need" ]; then
  echo "gpu-check: DEADLINE leaves $(left) s, less than the $need s of call ${call:0:1}'s shortest step: nothing started"
  exit 2
fi

status=0 skipped=0
# step NAME TIMEOUT MIN CMD...: runs CMD (a command, or a function of this script) under
# `timeout` (TIMEOUT seconds, cut to what the deadline leaves), unless the deadline leaves less
# than MIN seconds: then it is skipped and listed. Its time and exit status go to
# OUT/steps.jsonl, its own lines to the console (fd 3) whatever CMD's output is redirected to.
# Returns CMD's status (124: timed out; 125: skipped).
step() {
  local name=$1 limit=$2 min=$3 t0 rc l el
  shift 3
  l=$(left)
  if [ "$l" -lt "$min" ]; then
    echo "   $name: skipped: the deadline leaves $l s, it needs at least $min s" >&3
    printf '{"call":"%s","step":"%s","skipped":"deadline","left_s":%d}\n' "$cur" "$name" "$l" >> "$OUT/steps.jsonl"
    skipped=1
    return 125
  fi
  [ "$l" -lt "$limit" ] && limit=$l
  t0=$(date +%s.%N)
  if declare -F "$1" >/dev/null; then
    timeout -k 5 "$limit" bash -c "$(declare -f "$1"); $1"
  else
    timeout -k 5 "$limit" "$@"
  fi
  rc=$?
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "   $name: TIMED OUT after $limit s" >&3; fi
  printf '{"call":"%s","step":"%s","rc":%d,"seconds":%s,"timeout_s":%d}\n' "$cur" "$name" "$rc" "$el" "$limit" >> "$OUT/steps.jsonl"
  echo "   ($name: $el s, exit status $rc; $(( $(date +%s) - started )) s into the call)" >&3
  return $rc
}
cur=${call:0:1}

# --- set-up shared by both calls (no step: it only unpacks and sets variables) ---
{ cat BUILD_INFO 2>/dev/null; echo "this machine: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -1)"; } | tee "$OUT/BUILD_INFO.txt"
for gz in *.gz; do
  [ -e "$gz" ] || continue
  bin=${gz%.gz}
  if [ ! -x "$bin" ] || [ "$gz" -nt "$bin" ]; then
    gzip -dc "$gz" > "$bin.tmp" && chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin" || { echo "unpacking $gz failed"; exit 2; }
  fi
done
py=$(command -v python3 || true)
tpy=
for c in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch, torchvision' 2>/dev/null; then tpy=$(command -v "$c"); break; fi
done
if [ "$emulate" = 1 ]; then
  emu=$here/emulator
  if [ ! -f "$emu/libkernels_emu.so" ]; then
    echo "EMULATE=1: $emu/libkernels_emu.so not found: build the folder with EMULATE=1 make gpu-check"
    exit 2
  fi
  export CUDA_DRIVER_LIBRARY=$emu/libcuda.so.1 NCCL_LIBRARY=$emu/libnccl.so.2 CUBLAS_LIBRARY=$emu/libcublas.so.12 \
    CUDNN_LIBRARY=$emu/libcudnn.so.9 GP_FAKE_KERNELS=$emu/libkernels_emu.so GPUCHECK_EMULATED=1
  echo "EMULATE=1: the fake GPU libraries and the CPU emulator of kernels.cu in $emu (no GPU is used)"
else
  # PyTorch's wheels (site-packages/nvidia/*/lib): on LD_LIBRARY_PATH, so that cuDNN 9's
  # sub-libraries and cuBLAS's cuBLASLt resolve from the same wheels, and on GPU_LIB_DIRS,
  # which the Go side searches first.
  wheels=
  for p in $tpy $py; do
    wheels=$("$p" - <<'PY' 2>/dev/null
import glob, os, site
dirs = []
for s in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(s, "nvidia", "*", "lib")))
print(":".join(dict.fromkeys(dirs)))
PY
)
    [ -n "$wheels" ] && break
  done
  if [ -n "$wheels" ]; then
    export GPU_LIB_DIRS="${GPU_LIB_DIRS:+$GPU_LIB_DIRS:}$wheels"
    export LD_LIBRARY_PATH="$wheels${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
export emulate OUT here tpy py
export wheels=${wheels:-}
# The PTX every step loads: nvcc's for this GPU, made by call A (kept in the folder for call B).
if [ -f kernels.ptx ]; then export GP_CUDA_PTX=$here/kernels.ptx; fi

# --- call A ---
preflight() {
  local bad=0 need have
  need=$(sed -n 's/^needs glibc >= GLIBC_//p' BUILD_INFO 2>/dev/null | head -1)
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [ -z "$need" ] || [ -z "$have" ]; then
    echo "preflight: glibc: cannot compare (binaries need ${need:-?}, this machine has ${have:-?})"
  elif [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "preflight: FAIL: the binaries need glibc >= $need, this machine has $have: build the folder on an older distribution"
    bad=1
  else
    echo "preflight: glibc $have (the binaries need >= $need)"
  fi
  if [ "$emulate" != 1 ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1; then
      echo "preflight: FAIL: nvidia-smi not found: no NVIDIA driver on this machine"
      bad=1
    elif ! nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader; then
      echo "preflight: FAIL: nvidia-smi lists no GPU"
      bad=1
    fi
    echo "preflight: LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    [ -n "${wheels:-}" ] || echo "preflight: no PyTorch nvidia wheels found: the libraries come from the system's paths"
  fi
  for b in gpucheck.test tape.test imagenet; do
    [ -x "$b" ] || { echo "preflight: FAIL: $b missing"; bad=1; continue; }
    if ldd "$b" 2>&1 | grep -q "not found"; then
      echo "preflight: FAIL: $b lacks libraries:"; ldd "$b" | grep "not found"; bad=1
    fi
  done
  if [ -n "$tpy" ]; then
    "$tpy" -c 'import torch, torchvision; print("preflight: torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
  else
    echo "preflight: PyTorch and torchvision not found: the table will have no PyTorch column"
  fi
  [ $bad -eq 0 ]
}

build_ptx() {
  local cc arch
  if [ "$emulate" = 1 ]; then
    cc=${EMULATED_CC:-8.0}
  else
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
    [ -n "$cc" ] || { echo "nvcc: FAIL: nvidia-smi gave no compute capability"; return 1; }
  fi
  arch=compute_${cc/./}
  if ! command -v nvcc >/dev/null 2>&1; then
    if [ "$emulate" = 1 ] || [ "${ALLOW_EMBEDDED_PTX:-0}" = 1 ]; then
      cp kernels.embedded.ptx kernels.ptx || return 1
      echo "nvcc: not found: every step uses the PTX the binaries embed (kernels.embedded.ptx, $(grep -m1 -o 'Generated by [A-Za-z -]*' kernels.ptx))"
      return 0
    fi
    echo "nvcc: FAIL: nvcc not found (PATH=$PATH): the kernels cannot be built for this GPU; ALLOW_EMBEDDED_PTX=1 runs the embedded PTX instead"
    return 1
  fi
  nvcc --version | tail -2
  if ! nvcc -arch="$arch" -ptx -O3 -o kernels.ptx.tmp kernels.cu > "$OUT/nvcc.txt" 2>&1; then
    echo "nvcc: FAIL: nvcc -arch=$arch -ptx kernels.cu (nvcc.txt):"; tail -20 "$OUT/nvcc.txt"; rm -f kernels.ptx.tmp
    return 1
  fi
  mv kernels.ptx.tmp kernels.ptx
  echo "nvcc: kernels.ptx for $arch (compute capability $cc): $(grep -c '^\.visible \.entry' kernels.ptx) entry points"
  # The committed PTX is go generate's compute_80 one (cuda/kernels/kernels.go).
  if [ "$arch" = compute_80 ]; then
    cp kernels.ptx "$OUT/kernels.compute_80.ptx"
  elif nvcc -arch=compute_80 -ptx -O3 -o "$OUT/kernels.compute_80.ptx" kernels.cu >> "$OUT/nvcc.txt" 2>&1; then
    echo "nvcc: kernels.compute_80.ptx (as go generate ./cuda/kernels) for cuda/kernels/kernels.ptx"
  else
    echo "nvcc: FAIL: the compute_80 PTX (nvcc.txt)"; return 1
  fi
}

call_a() {
  echo "== A1. preflight"
  if ! step preflight "$T_PREFLIGHT" 5 preflight; then
    echo "gpu-check: the preflight failed: nothing else runs"; return 2
  fi
  echo "== A2. nvcc: the kernels' PTX for this GPU, used by every later step"
  if ! step nvcc "$T_NVCC" 5 build_ptx; then
    echo "gpu-check: no PTX built for this GPU: nothing else runs"; return 2
  fi
  export GP_CUDA_PTX=$here/kernels.ptx
  cp kernels.ptx "$OUT/kernels.ptx"
  echo "== A3. the libraries (each one's resolved file and version) and the PTX, loaded as every later step loads them"
  if ! step libraries "$T_PREFLIGHT" 5 ./gpucheck.test -test.run '^TestPreflight$' -test.v -test.count=1 > "$OUT/preflight.txt" 2>&1; then
    cat "$OUT/preflight.txt"
    echo "gpu-check: a library or the PTX does not load: nothing else runs"; return 2
  fi
  grep -E '^ +preflight_test' "$OUT/preflight.txt" | sed 's/^ *preflight_test.go:[0-9]*: /   /'
  [ "${GO_TESTS:-1}" = 0 ] && return 0
  echo "== A4. gpucheck.test: kernels, GEMM, convolution, NCCL world 1, ResNet and Swin through cuda/tape vs the CPU"
  step gpucheck.test "$T_GPUCHECK" 20 ./gpucheck.test -test.v -test.count=1 -test.timeout="$(( T_GPUCHECK - 5 ))s" > "$OUT/results.txt" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 125 ] || status=1
  grep -E '^(--- (FAIL|SKIP)|FAIL|ok|PASS|panic)' "$OUT/results.txt" | tail -20
  grep '^{"bench"' "$OUT/results.txt" > "$OUT/gp.jsonl" 2>/dev/null || true
  echo "== A5. tape.test: the graph executor on the device"
  step tape.test "$T_TAPE" 15 ./tape.test -test.v -test.count=1 -test.timeout="$(( T_TAPE - 5 ))s" > "$OUT/tape.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 125 ] || status=1
  grep -E '^( *--- FAIL|FAIL|ok|PASS|panic)' "$OUT/tape.txt" | tail -20
  echo "== A6. compute-sanitizer memcheck over the small op tests"
  local cs
  cs=$(command -v compute-sanitizer || true)
  [ -z "$cs" ] && command -v nvcc >/dev/null 2>&1 && [ -x "$(dirname "$(command -v nvcc)")/compute-sanitizer" ] && cs=$(dirname "$(command -v nvcc)")/compute-sanitizer
  if [ "$emulate" = 1 ] || [ -z "$cs" ] || [ "$T_MEMCHECK" -le 0 ]; then
    echo "   memcheck: skipped (${cs:+emulated run}${cs:-compute-sanitizer not found})"
  else
    step memcheck "$T_MEMCHECK" 15 "$cs" --tool memcheck --error-exitcode 3 --print-limit 20 ./gpucheck.test -test.count=1 \
      -test.run '^(TestElementwiseVsCPU|TestSoftmaxVsCPU|TestLayerNormVsCPU|TestBatchNormVsCPU|TestRoundingMatchesAmp|TestIndexOpsVsCPU)$' > "$OUT/memcheck.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 125 ] || status=1
    grep -E 'ERROR SUMMARY|^(FAIL|ok|PASS)' "$OUT/memcheck.txt" | tail -5
  fi
  return 0
}

# --- call B ---
classes=10
# trainer NAME ARCH IMAGE BATCH DEVICE STRATEGY AMP STEPS OPT: one run (OPT "" is the trainer's
# default), logged to OUT/logs/NAME.log, its metrics copied to OUT/runs/NAME, and listed in
# OUT/trainer.jsonl with its exit status (-1 and "skipped" when the deadline left no room).
trainer() {
  local name=$1 arch=$2 image=$3 batch=$4 dev=$5 strat=$6 amp=$7 steps=$8 opt=$9
  # Enough images per class that no epoch ends within the steps (no validation pass).
  local per=$(( ( (STEPS + 1) * batch + classes - 1) / classes ))
  local flags=()
  [ "$amp" != off ] && flags+=(-amp "$amp")
  [ -n "$opt" ] && flags+=(-opt "$opt")
  local t0=$SECONDS rc
  step "trainer $name" "$T_TRAIN" $(( T_TRAIN / 3 )) ./imagenet -arch "$arch" -image-size "$image" -b "$batch" -epochs 1 -max-steps "$steps" -seed 1 \
    -data-format synthetic -data "$here/data/synth-$image-$per" -synthetic-classes "$classes" \
    -synthetic-train "$per" -synthetic-val 1 -synthetic-size "$image" -j "$WORKERS" \
    -print-freq 1 -progress log -resume none -tensorboard=false -timeline-steps 0 -timeout "$TRAIN_TIMEOUT" \
    -device "$dev" -strategy "$strat" "${flags[@]}" -out "$here/runs/$name" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  rm -f "runs/$name"/ckpt-* 2>/dev/null # the -max-steps checkpoint: not needed, and large
  mkdir -p "$OUT/runs/$name" && cp "runs/$name/metrics.jsonl" "$OUT/runs/$name/" 2>/dev/null
  local skip=
  [ $rc -eq 125 ] && { rc=-1; skip=',"skipped":"deadline"'; }
  printf '{"name":"%s","arch":"%s","image":%d,"batch":%d,"device":"%s","strategy":"%s","amp":"%s","opt":"%s","steps":%d,"rc":%d,"seconds":%d,"out":"runs/%s","log":"logs/%s.log"%s}\n' \
    "$name" "$arch" "$image" "$batch" "$dev" "$strat" "$amp" "$opt" "$steps" "$rc" $(( SECONDS - t0 )) "$name" "$name" "$skip" >> "$OUT/trainer.jsonl"
  if [ "$rc" -eq 0 ]; then
    echo "   $name: $(grep -m1 '^summary:' "$OUT/logs/$name.log")"
  elif [ "$rc" -gt 0 ]; then
    echo "   $name: exit status $rc: $(grep '^imagenet: ' "$OUT/logs/$name.log" | tail -1)"
  fi
}

# The optimizer a device row runs (what the trainer picks without -opt): AdamW for Swin and
# for the device's zero3, SGD otherwise. Its CPU reference runs the same.
optimizer_of() { case $1:$2 in swin*:* | *:zero3) echo adamw ;; *) echo sgd ;; esac; }

call_b() {
  echo "== B7. the trainer: MODELS=\"$MODELS\" STRATEGIES=\"$STRATEGIES\" AMPS=\"$AMPS\", $STEPS steps on the device, $CPU_STEPS on the CPU"
  if [ -z "${GP_CUDA_PTX:-}" ]; then
    # A machine that did not keep call A's folder: build the PTX again (the same step).
    echo "   no kernels.ptx from call A in $here: building it"
    if ! step nvcc "$T_NVCC" 5 build_ptx; then
      echo "gpu-check: no PTX built for this GPU: nothing else runs"; return 2
    fi
    export GP_CUDA_PTX=$here/kernels.ptx
    cp kernels.ptx "$OUT/kernels.ptx"
  fi
  echo "   the kernels' PTX: $GP_CUDA_PTX"
  rm -rf runs "$OUT/runs" "$OUT/logs" && mkdir -p runs data "$OUT/runs" "$OUT/logs" && : > "$OUT/trainer.jsonl"
  local spec arch image batch amp strat opt opts
  for spec in $MODELS; do
    IFS=: read -r arch image batch <<< "$spec"
    for amp in $AMPS; do
      opts=$(for strat in $STRATEGIES; do optimizer_of "$arch" "$strat"; done | sort -u)
      for opt in $opts; do
        trainer "cpu-$arch-$amp-$opt" "$arch" "$image" "$batch" cpu none "$amp" "$CPU_STEPS" "$opt"
      done
      for strat in $STRATEGIES; do
        trainer "cuda-$arch-$strat-$amp" "$arch" "$image" "$batch" cuda "$strat" "$amp" "$STEPS" ""
      done
    done
  done
  if [ "${TORCH:-1}" != 0 ]; then
    echo "== B8. PyTorch on the same GPU (torch_bench.py)"
    local tdev=cuda tamps=$AMPS
    [ "$emulate" = 1 ] && tdev=cpu
    [ "$emulate" != 1 ] && tamps="$AMPS tf32"
    : > "$OUT/torch.jsonl"
    if [ -n "$tpy" ] && "$tpy" -c "import torch; assert '$tdev' == 'cpu' or torch.cuda.is_available()" 2>/dev/null; then
      step torch_bench "$T_TORCH" 20 "$tpy" torch_bench.py --device "$tdev" --models "$(echo "$MODELS" | tr ' ' ,)" --amp "$(echo "$tamps" | tr ' ' ,)" \
        --steps "$(( STEPS - WARMUP ))" --warmup "$WARMUP" > "$OUT/torch.jsonl" 2> "$OUT/torch.log"
      local rc=$?
      cat "$OUT/torch.jsonl"
      [ $rc -eq 0 ] || [ $rc -eq 125 ] || { status=1; tail -5 "$OUT/torch.log"; }
    else
      echo "   PyTorch and torchvision ($tdev) not found: the table has no PyTorch column"
    fi
  fi
  echo "== B9. the table (table.txt, table.jsonl)"
  if [ -n "$py" ]; then
    # The table is what the call is for: it gets its few seconds even past the deadline.
    timeout "$T_TABLE" "$py" compare.py --dir "$OUT" --cpu-steps "$CPU_STEPS" --warmup "$WARMUP" || status=1
  else
    echo "python3 not found: no table (the logs are in $OUT/logs, trainer.jsonl lists the runs)"
    status=1
  fi
}

[ "$call" = A ] || [ "$call" = AB ] && : > "$OUT/steps.jsonl"
rc=0
case $call in
  A) call_a; rc=$? ;;
  B) call_b; rc=$? ;;
  AB) call_a; rc=$?; if [ $rc -eq 0 ]; then cur=B; call_b; rc=$?; fi ;;
esac
[ $rc -ne 0 ] && status=$rc
[ $status -eq 0 ] && [ $skipped -eq 1 ] && status=3
cp README.md "$OUT/" 2>/dev/null
echo "gpu-check: call $call: exit status $status after $(( $(date +%s) - started )) s; output in $OUT:"
(cd "$OUT" && find . -type f | sort | sed 's/^\.\//   /')
exit $status
