// Package gpucheck holds the checks that need a real NVIDIA GPU: kernels and GEMM against
// the CPU, NCCL collectives at world 1, ResNets and Swins trained through cuda/tape against
// nn.Compile on the CPU, and GEMM throughput next to PyTorch. Its tests skip where there is
// no GPU, and fail instead when REQUIRE_GPU=1 (set by run.sh on the GPU machine, so that a
// silent skip cannot pass); without a GPU, TestOnCPUEmulator runs them on cuda/cudatest's
// emulator.
//
// `make gpu-check` (build.sh) compiles the test binaries with `go test -c` and the trainer of
// examples/imagenet, and copies them with run.sh, torch_bench.py and compare.py into one
// folder; carry it to the GPU machine (which needs no Go) and run `./run.sh A` there (the
// preflight, the PTX built by nvcc for that GPU, these checks and the executor's), then
// `./run.sh B` (the trainer's runs against the CPU and PyTorch, in one table; README.md).
package gpucheck
