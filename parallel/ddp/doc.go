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
// # Buckets and zero copy
//
// Gradients live in nn.ParamSet.Grad, one flat buffer laid out in reverse registration
// order. A Bucket is a contiguous range of that buffer, so reducing it needs no copy. The
// first bucket is small (1 MiB) so that communication starts early; the others are capped at
// 25 MiB, as in PyTorch. Unlike PyTorch, the last bucket is small too (1 MiB,
// LastBucketBytes): its all-reduce can only start when backward ends, so everything in it is
// on the critical path; with PyTorch's layout resnet18's last bucket holds 20 MB (the rest of
// layer4, layer3, layer2, layer1), with a small one the bucket before it reduces while the
// first layers' backward still runs. After the first synchronised step the buckets are rebuilt once from the order in
// which gradients actually arrived; because a bucket must stay a contiguous range, the
// rebuild can only move the cuts: each cut is moved to the nearest point at which every
// gradient before it has arrived before every gradient after it (a "closure point"), so no
// bucket waits for a gradient that arrives late while holding many that arrived early.
// Rank 0 decides the cuts and broadcasts them, so every rank has the same buckets.
//
// The default hook divides by the world size before summing, as PyTorch's; DDP does the
// division per parameter as each gradient becomes ready (while it is still in the cache)
// rather than as a pass over the whole bucket at launch.
//
// With SharedGradients the gradient buffer itself lies in memory every rank of the host
// maps (comm.AllocFloat32), and each bucket is all-reduced in place: every rank reduces its
// slice of the bucket straight from the peers' gradients and writes the result into all of
// them. That is half the memory traffic of copying through staging buffers, and on a
// machine whose ranks share cores and memory bandwidth that traffic is most of DDP's cost
// (go run ./bench/ddp -shared-grads=false measures DDP without it).
//
// # Optimizer overlap
//
// Program.RunStep with an optimizer that can step in pieces (optim.Ranged: optim.SGD, Adam,
// AdamW) updates each bucket's parameters as soon as that bucket's all-reduce completes,
// while the later buckets are still reducing. The rank that finishes backward first spends
// its wait for the slower rank's last gradients updating parameters instead of idling. The
// result is bit-identical to one optimizer step after the last reduction.
//
// Buckets are launched strictly in index order, whatever order they fill in, so every rank
// issues the same collectives in the same order (comm matches them by sequence number).
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
// # Backends
//
// DDP is the reducer: it decides when a gradient is final, which bucket to launch, when a
// step may use a bucket's result, and runs the rebuild, Join, static graph, unused
// parameters and the timeline, with no I/O of its own beyond its small control messages on
// the group. A Backend moves the bytes: New's host backend runs nn programs and reduces over
// the comm.Group; cuda/devddp's (WithBackend) runs on a device and reduces device memory
// with NCCL, ordered by CUDA events. New accepts a backend once it has checked the models and
// broadcast rank 0's parameters; an option a backend cannot honour is refused then, the
// error naming WithBackend and the backend.
//
// # Errors
//
// A step that fails still launches every remaining bucket before it returns, so the other
// ranks are never left waiting for a collective this rank will not issue; a dead peer makes
// comm fail every pending and later collective, and the error names the bucket and the rank.
package ddp
