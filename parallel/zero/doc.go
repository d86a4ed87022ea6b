// Package zero is ZeRO-3 data parallelism (docs/DESIGN.md §7): every rank holds 1/N of the
// float32 master parameters, of the gradients and of the optimizer state, and gathers a
// unit's full parameters only while a step needs them.
//
// The flat parameter buffer of nn.ParamSet is cut into gather units (top-level modules by
// default, see WithUnitDepth and WithUnitKey). Each unit is sharded on its own, like PyTorch
// FSDP's flat parameters: unit u of L elements is padded to a multiple of the world size N
// and rank r owns elements [r·L'/N, (r+1)·L'/N) of it. A rank's persistent model state is
// its master shard, gradient shard and optimizer state: 16·Ψ/N bytes for float32 AdamW, plus
// at most N-1 padding elements per unit.
//
// During Program.Run a gather op, put in front of every parameter by an nn parameter hook,
// all-gathers the parameter's unit the first time the tape reaches it and issues the
// all-gather of the next unit in forward order at once (prefetch), so that communication
// overlaps the current unit's compute. The gather of a unit's first parameter also takes
// the newest forward node as a second input (normally the previous unit's output): it
// releases the previous unit after its forward, and in backward contributes a zero gradient
// to that node through a barrier that gathers the previous unit again, so every backward op
// of that unit waits for it (schedule.go proves this from the graph's data dependencies and
// keeps a unit gathered where it cannot). The first gradient of a unit prefetches the
// re-gather of the unit before it; a unit goes again once every op reading it has run. The
// gathered memory is anonymous mmap'd regions whose pages go back to the kernel with
// madvise(MADV_FREE): the kernel takes them when it needs memory, and until then the next
// gather writes them without a page fault (with MADV_DONTNEED the zero-fill faults of every
// gathered byte, twice a step, cost more than the rest of ZeRO's overhead). Gradients are
// handed over by nn's gradient sink: divided by N into the unit's padded reduce-scatter
// input; once a unit is complete its reduce-scatter to the owners is issued while backward
// goes on, and the results are added into the gradient shard in launch order as they arrive
// (ReduceSchedule, the schedule of every backend). The tape's register that held a gradient
// loses its pages (lazily, the same way) after the sink has copied it, where the graph shows
// nothing else reads it. The step's peak and the memory held between steps are counted from
// the engine's buffers (Memory); the process's VmRSS also counts freed pages the kernel has
// not taken yet.
//
// On the host, after New the model's Data and Grad are placeholders of zeros: writing them is harmless
// and does not reach the shards (see Engine.Model).
//
// Offload: OffloadCPU keeps everything in host memory (on a CPU-only machine that is where
// ZeRO keeps it anyway; the option only selects the multi-goroutine fused AdamW). OffloadDisk
// keeps the optimizer state (and with DiskMaster the master shard) in files mapped with
// mmap under a directory: the state lives in the page cache and the files, the step
// prefetches it with MADV_WILLNEED when the forward starts and drops it from the process
// with MADV_DONTNEED after the optimizer step, so the process's RSS drops by its size.
//
// Checkpoints (Engine.Save, Engine.Load) are directories of per-rank shard files written
// atomically, a manifest written last, and a LATEST pointer; Load reshards to any world
// size, and Consolidate (cmd/zero-consolidate) merges a checkpoint into one .npz with
// torchvision's keys.
//
// New is the one constructor, on the host and on a device. The host (this package's memory,
// regions and gather ops) is the default; WithBackend chooses another Backend, and
// cuda/devzero's puts the shards, the optimizer and the programs on a CUDA device:
//
//	e, err := zero.New(ctx, m, ncclGroup, zero.WithBackend(devzero.NewBackend(dev)),
//		zero.WithOptimizer(zero.AdamW(1e-3)))
//
// New checks the models, broadcasts rank 0's and cuts the units and shards (Layout) once for
// every backend; the engine's methods (the gradient shard's UnscaleGrads, ScaleGrads,
// GradSumSquares and ClipGradNorm among them; ShardGrad and ShardParams are host copies on
// both), its Program's verbs and the checkpoints (Shard) are the same on both, so a
// checkpoint moves between the host and the device, and between world sizes, either way. A backend refuses at New, naming the option and itself, an option it
// cannot honour (the device: disk offload).
package zero
