// Package cuda runs the project's tensor operations on an NVIDIA GPU, loaded at run time: the
// driver API, cuBLAS and NCCL are opened with dlopen (cuda/driver, cuda/cublas,
// cuda/libnccl), kernels are committed PTX (cuda/kernels), so the package builds and vets on
// machines without CUDA and, built with CGO_ENABLED=0, reports "built without cgo".
//
// # How device values flow
//
// A [Device] owns one CUDA context (the device's primary context, shared with NCCL and
// PyTorch), one non-blocking stream, a caching allocator of device memory and one of pinned
// host memory (cuda/memory), cuBLAS and (optional) cuDNN handles bound to the stream and the
// loaded kernels.
// Device values are [Tensor]s: a block of device memory with a shape and a dtype (float32,
// float16, bfloat16), contiguous, NCHW for images. Every operation enqueues on the device's
// stream and returns at once; because all work of a device is on one stream, ordering is
// implicit and a freed block may be reused by the next allocation without waiting. Only
// copies to the host ([Tensor.ToHost]) and [Device.Synchronize] wait.
//
// The device path is explicit rather than hidden behind gorgonia's engine: gorgonia's
// TapeMachine executes *tensor.Dense values whose memory it reads on the host in many places
// (broadcasting, reductions, its own BatchNorm), so routing a graph through it with device
// memory would fault wherever an op is not device-aware. The design is therefore
// (docs/DESIGN.md §9):
//
//   - ops are device-aware functions on Tensors here (forward and backward of GEMM and
//     batched GEMM, convolution, elementwise, activations, softmax, layer norm, batch norm,
//     pooling, cross-entropy, reductions, row gather and scatter-add, permutations,
//     broadcasts and the autocast rounding/casts), each documented with its layout and
//     compared with the CPU in cuda/gpucheck;
//   - a model's training step on the GPU is driven by the same module tree that builds the
//     CPU graph: its structure (names, shapes, strides) selects device ops in forward order,
//     each recording a backward closure, and the backward pass writes one gradient per named
//     parameter, copied into the layout of the flat gradient buffer (nn.ParamSet.Grad), so
//     DDP buckets and ZeRO shards are unchanged. cuda/gpuresnet does this for ResNet and
//     cuda/gpuswin for the Swin Transformer (window partition, shift, padding and reverse as
//     row gathers, the relative-position bias and mask as broadcasts, attention as batched
//     GEMMs, stochastic depth from the model's RNG);
//   - parameters stay float32 masters; with autocast, GEMM and convolution operands are cast
//     to fp16/bf16 on the device and multiplied by cuBLAS with float32 accumulation, while
//     norms, softmax and losses stay float32, as torch.autocast's lists.
//
// Convolution runs through cuDNN when it loads (cuda/cudnn: PyTorch's wheels ship it; float32
// without TF32, as PyTorch with allow_tf32 off), and otherwise, or by SetConvImpl, as im2col
// plus one strided batched cuBLAS GEMM per layer (weight gradients: one GEMM per image,
// accumulated), which needs no further library. Both are checked against the CPU; groups
// must be 1.
//
// Multi-GPU: one process per GPU, each with its Device and an NCCL process group
// (parallel/comm/nccl), whose AllReduceDevice reduces device-resident buffers in place.
package cuda
