// Package gpucheck holds the checks that need a real NVIDIA GPU: kernels and GEMM against
// the CPU, ResNet and Swin training steps against the CPU model, NCCL collectives at world
// 1, and throughput next to PyTorch. Its tests skip where
// there is no GPU, and fail instead when REQUIRE_GPU=1 (set by run.sh on the GPU machine, so
// that a silent skip cannot pass).
//
// `make gpu-check` (build.sh) compiles the test binaries with `go test -c` and copies them
// with run.sh and torch_bench.py into one folder; carry it to the GPU machine (which needs no
// Go) and run ./run.sh there.
package gpucheck
