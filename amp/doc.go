// Package amp is automatic mixed precision: an autocast policy that makes lower-precision
// ops compute in bf16 or fp16, and PyTorch's GradScaler, also sharded over a process group.
//
// gorgonia has no 16-bit dtype, so on the CPU autocast is emulated (docs/DESIGN.md §8): the
// inputs and the output of each lower-precision op are rounded to the format by a rounding
// op (Round: round-to-nearest-even, subnormals, overflow to ±inf, NaN kept, bit-exact with
// torch's casts), and the op itself computes in float32 on the rounded values, as 16-bit
// kernels accumulate in float32. The backward of the rounding op rounds the incoming
// gradient to the same format, so gradients underflow and overflow as in 16-bit training.
// This is honest numerics, not speed: every cast is an extra pass over memory.
//
// # Op table
//
// PyTorch's autocast (torch/csrc/autograd/autocast_mode.cpp, 1.13) sorts ops into lists.
// Ours, with the ops of this project:
//
//	PyTorch list        PyTorch ops (CPU bf16 / CUDA fp16)           here
//	lower precision     conv1d/2d/3d, conv_transpose*, linear,       nn.Conv2d, nn.Linear (through
//	                    matmul, mm, bmm, addmm, addbmm, baddbmm      Builder.Autocast), so Swin's
//	                    (CUDA also: prelu, chain_matmul, ...)        qkv and proj (its attention
//	                                                                 products: float32, below);
//	                                                                 gorgonia's G.Mul, G.BatchedMatMul,
//	                                                                 G.Tensordot, G.Conv2d/Conv1d's
//	                                                                 product, ops.Linear/Conv2d used
//	                                                                 directly (cast by nn.Compile)
//	float32             softmax, log_softmax, layer_norm,            ops.Softmax, LogSoftmax,
//	                    group_norm, batch_norm*, nll_loss,           LayerNorm, BatchNorm2d,
//	                    cross_entropy, mse_loss, l1_loss, sum,       CrossEntropy, Sum, Mean:
//	                    prod, cumsum, exp, log, pow, norm, ...       never cast, stay float32
//	promote / other     cat, stack, add, relu, pooling, outer, ...   float32 on the (rounded)
//	                                                                 values they receive (G.OuterProd
//	                                                                 too: torch.outer is on no list)
//
// (*) CUDA autocast runs batch_norm in the input's dtype through cuDNN; norms keep float32
// statistics either way. Swin's attention products (q·kᵀ and attention·v, inside
// swin.WindowAttention) are not autocast yet and stay float32, where PyTorch runs them as
// 16-bit bmm; the device executor keeps them float32 too, to compute what the CPU computes.
// A plain gorgonia build function needs no marking: under nn.WithAutocast, nn.Compile
// casts gorgonia's lower-precision ops itself, at the graph's root path "" (Only(...)
// leaves them float32), and leaves alone the ops a module or the user marked with
// Builder.Autocast / AutocastOutput; a product with a scalar result (G.Mul of two vectors)
// is an error naming b.Autocast, which marks it by hand (nn/autocast_graph.go has the
// rules). Products of float64 tensors stay float64, as in PyTorch.
// The last row is where the emulation differs from PyTorch: PyTorch
// runs relu, max pooling and additions in 16 bits when their inputs are 16-bit. ReLU and max
// pooling of rounded values are exact in either; an addition (a residual connection) is
// rounded once more in PyTorch and not here.
//
// # Scoping
//
// A Policy is applied with nn.WithAutocast and is scoped by module path: Except("fc") keeps
// the head in float32, Only("layer4") restricts autocast to a subtree, as nested
// torch.autocast regions do.
//
// # Loss scaling
//
// GradScaler.ScaleLoss multiplies the loss by the scaler's current scale inside the graph,
// reading the scale when the graph runs, so Update never rebuilds the graph. Unscale
// divides the flat gradient buffer by the scale and checks it for inf/NaN in the same pass;
// Step skips the optimizer after an inf/NaN; Update backs off or grows the scale exactly as
// torch's _amp_update_scale_. NewShardedScaler all-reduces the inf/NaN flag (Max) over a
// comm.Group, so that DDP or ZeRO-3 ranks, each holding all gradients or a shard of them,
// skip the same steps and keep the same scale.
package amp
