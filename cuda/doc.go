// Package cuda runs the project's tensor operations on an NVIDIA GPU, loaded at run time: the
// driver API, cuBLAS and NCCL are opened with dlopen (cuda/driver, cuda/cublas,
// cuda/libnccl), kernels are committed PTX (cuda/kernels), so the package builds and vets on
// machines without CUDA and, built with CGO_ENABLED=0, reports "built without cgo".
//
// # How device values flow
//
// A [Device] owns one CUDA context (the device's primary context, shared with NCCL and
// PyTorch), one non-blocking stream, a caching allocator of device memory and one of pinned
// host memory (cuda/memory), a cuBLAS handle bound to the stream and the loaded kernels.
// Device values are [Tensor]s: a block of device memory with a shape and a dtype (float32,
// float16, bfloat16), contiguous, NCHW for images. Every operation enqueues on the device's
// stream and returns at once; because all work of a device is on one stream, ordering is
// implicit and a freed block may be reused by the next allocation without waiting. Only
// copies to the host ([Tensor.ToHost]) and [Device.Synchronize] wait.
//
// The device path is explicit rather than hidden behind gorgonia's engine: gorgonia's
// TapeMachine executes *tensor.Dense values whose memory it reads on the host in many places
// (broadcasting, reductions, its own BatchNorm), so routing a graph through it with device
// memory would fault wherever an op is not device-aware. The design is therefore (DESIGN §9):
//
//   - ops are device-aware functions on Tensors here (forward and backward of GEMM,
//     elementwise, activation, softmax, layer norm, batch norm, pooling, reductions and the
//     autocast rounding/casts), each documented with its layout and compared with the CPU in
//     cuda/gpucheck;
//   - a model's training step on the GPU is a program the nn builder emits: the same module
//     tree that builds a gorgonia graph for the CPU walks its layers calling these ops in
//     forward order and their backward in reverse, writing gradients into one flat device
//     gradient buffer laid out as the CPU one, so DDP buckets become slices of it and the
//     NCCL backend reduces them in place (nccl.Group.AllReduceDevice);
//   - parameters stay the flat float32 master buffer; with autocast, GEMM inputs are cast to
//     fp16/bf16 on the device and multiplied by cublasGemmEx with float32 accumulation.
//
// What exists today: the loading layer, the allocators, the kernels and GEMM, checked against
// the CPU on a GPU by cuda/gpucheck. The builder-emitted training step (convolution included)
// is the next piece; see cuda/gpucheck's README for what the GPU check runs.
package cuda
