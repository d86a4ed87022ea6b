// Package ddp is DistributedDataParallel: it keeps one model replica per rank in step by
// reducing gradients in buckets while backward is still running (docs/DESIGN.md §5).
//
// The split follows PyTorch's c10d: package comm moves bytes, this package decides when a
// bucket of gradients is ready and launches its reduction, and the model never learns that
// it is distributed. A typical loop (the verbs are package train's, the same under every
// strategy):
//
//	d, err := ddp.New(ctx, model, group)                  // checks models agree, broadcasts rank 0's
//	prog, err := d.Compile(build, nn.WithOptimizer(opt))  // adds the gradient hooks
//	for each batch {
//		prog.SetInput("images", x) ...
//		err = prog.Run(ctx)   // forward, backward with bucketed all-reduces, average
//		err = prog.Step(ctx)  // the optimizer's update, then the gradients are zeroed
//	}
//
// or prog.RunStep(ctx) for both, with each bucket updated as soon as its reduction ends.
// On a CUDA device the loop is the same, with one option at New and the optimizer still
// Compile's (cuda/devddp):
//
//	d, err := ddp.New(ctx, model, group, ddp.WithBackend(devddp.NewBackend(dev, nccl)))
//	prog, err := d.Compile(build, nn.WithOptimizer(opt))  // optim's SGD, Adam or AdamW, stepped on the device
//
// A plain gorgonia program is a model too (nn.NewGraphModel): compiled with a gorgonia solver
// (nn.WithSolver), its learnables' Node.Grad() is the averaged gradient after Run, so the
// solver, or a hand-written update, steps every replica alike. Every CheckEvery steps the
// ranks compare hashes of their parameters and buffers, so a replica that drifted is an
// error naming the tensor, not a silent divergence.
//
// # Buckets
//
// Gradients live in nn.ParamSet.Grad, one flat buffer laid out in reverse registration
// order; a Bucket is a contiguous range of it, so reducing one needs no copy. The first and
// last buckets are small (FirstBucketBytes, LastBucketBytes), the others capped at 25 MiB
// (BucketCapBytes). After the first synchronised step rank 0 moves the cuts once to match
// the order in which gradients arrived and broadcasts them. Buckets are launched strictly
// in index order, so every rank issues the same collectives in the same order. The reasons
// for each choice are in docs/DESIGN.md §5.
//
// # Collective order
//
// A synchronised step issues, in this order: the join handshake (inside Join only), the
// buffer broadcast (BroadcastBuffers), the SyncBatchNorm reductions of forward and backward
// interleaved with the bucket reductions as the tape reaches them, and once, after the first
// step, the bucket rebuild broadcast. All ranks must run the same graph for this order to
// agree. SyncBatchNorm's backward reductions queue behind the buckets already launched (comm
// runs collectives one at a time), which costs overlap; PyTorch's NCCL stream behaves alike.
//
// # Errors
//
// A step that fails still launches every remaining bucket before it returns, so the other
// ranks are never left waiting for a collective this rank will not issue; a dead peer makes
// comm fail every pending and later collective, and the error names the bucket and the rank.
package ddp
