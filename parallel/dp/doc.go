// Package dp is single-process DataParallel: N replicas of one model run a scattered batch
// concurrently and their gradients are summed onto the master's, as torch.nn.DataParallel.
//
// # A step
//
// [DataParallel.Run] does what DataParallel.forward plus the backward through it do in
// PyTorch, and [DataParallel.Step] is the optimizer's step (the verbs of package train):
//
//  1. Scatter: every input is split along dim 0 as torch.chunk splits it ([Chunks]): chunks of
//     ceil(N/R) samples, the last one smaller, and fewer than R chunks (fewer replicas) when the
//     batch is small (N=5 over 4 replicas is 2+2+1 on three replicas).
//  2. Run: each active replica runs forward and backward on its chunk, concurrently, one
//     goroutine per replica. gorgonia graphs have static shapes, so a replica compiles one
//     program per chunk size it meets and caches it; compiling happens on the caller's
//     goroutine, one replica after another, because gorgonia's graph construction is not
//     thread-safe (running tape machines concurrently is).
//  3. Gather: the named outputs (logits) are copied into master buffers in batch order, and the
//     replicas' mean losses are combined into the mean loss of the global batch:
//     loss = Σ_i (n_i/N)·loss_i.
//  4. Reduce: gradients are summed onto the model's flat gradient buffer (nn.ParamSet.Grad)
//     with the same weights, grad += Σ_i (n_i/N)·grad_i, so that the master holds the gradient
//     a single process would compute for the global batch's mean loss, even for uneven chunks.
//     Each replica accumulates into its own flat buffer (nn.WithGradBuffer) so that replicas
//     never write the same memory, and each element is summed in replica order
//     (deterministic for a given R and chunking; docs/DESIGN.md §6 says why a direct sum and
//     not an all-reduce). Like PyTorch's .grad, the master's buffer accumulates over Runs
//     (gradient accumulation) until Step or ZeroGrad zeroes it.
//
// Step then applies the optimizer (or gorgonia solver) given once, as nn.WithOptimizer in
// [WithBuildOptions], on the master's buffers, and zeroes them. Where the replicas run is a
// [Backend]'s; everything in this doc holds on every backend.
//
// PyTorch computes the loss on the master from the gathered outputs; here each replica's
// graph ends in its chunk's mean loss (what users do to keep the loss off device 0, and what
// a static graph needs). Both give the same gradient: in PyTorch the backward of the mean over
// the gathered batch scales each replica's output gradient by 1/N, here the reduction scales
// the replica's mean-loss gradient by n_i/N. A loss that is a sum over samples takes
// [WithSumLoss] (weights 1).
//
// # BatchNorm
//
// As in PyTorch's DataParallel, each replica normalises its chunk with the chunk's own
// statistics (mean and variance over the n_i samples of its chunk, not over the global
// batch), and only replica 0 updates the model's running statistics (the others update
// private copies, nn.WithPrivateBuffers, that are never read). So the running statistics
// after a step are those of the first chunk, and the training forward is not the
// single-process forward on the global batch: a model with BatchNorm in train mode is not
// equivalent to one replica on the same batch. DDP with SyncBatchNorm differs on both counts:
// it all-reduces the per-channel sums over the ranks so that every rank normalises with the
// statistics of the whole global batch, in forward and in backward, and every rank's running
// statistics move identically; it is equivalent to one process on the global batch, at the
// cost of a collective per BatchNorm layer, twice per step.
//
// # Threads
//
// The replicas share one process, so they share its BLAS: with OpenBLAS set
// OPENBLAS_NUM_THREADS=1 and use as many replicas as cores, so that R replicas keep R cores
// busy without oversubscription (the library reads the variable when the process starts).
// A single-replica run that is meant to use the whole machine should have
// OPENBLAS_NUM_THREADS set to the core count instead; bench/dp reports both baselines.
package dp
