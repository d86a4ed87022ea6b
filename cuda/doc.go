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
// Graphs run on the device through package cuda/tape, not through gorgonia's engine:
// gorgonia's TapeMachine executes *tensor.Dense values whose memory it reads on the host in
// many places (broadcasting, reductions, its own BatchNorm), so routing device memory
// through it would fault wherever an op is not device-aware. Instead (docs/DESIGN.md §9):
//
//   - ops are device-aware functions on Tensors here (forward and backward of GEMM and
//     batched GEMM, convolution, elementwise and gorgonia's pointwise ops (Unary, Binary),
//     activations, softmax, layer norm, batch norm, pooling, cross-entropy, reductions
//     (SumAxis), repeats, row gather and scatter-add, permutations, broadcasts and the
//     autocast rounding/casts), each documented with its layout and compared with the CPU
//     in cuda/gpucheck or cuda/tape;
//   - cuda/tape lowers the graph nn.Compile builds (forward and G.Grad's backward) op by op
//     to these functions and runs it with its values on the device; gradients come back
//     into the flat gradient buffer (nn.ParamSet.Grad) through the taps' hooks, so DDP
//     buckets and ZeRO shards are unchanged;
//   - cuda/tape lowers the project's own ops too (found by ops.Describe, which covers
//     nn/ops and every ops.Describer such as models/swin's, and amp.DescribeOp), so ResNet
//     and the Swin Transformer
//     run on the device as the graphs they are, with no hand-written device copy of a
//     model: the trainer's -device cuda and cuda/gpucheck's model tests use it;
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
// (parallel/comm/nccl), whose AllReduceDevice reduces device-resident buffers in place;
// cuda/devddp is DDP with the buckets reduced there, ordered by events, during backward.
// The optimizers' device loops (SGD, Adam) are here too, for cuda/tape's device State.
package cuda
