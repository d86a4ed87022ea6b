// Package zero is ZeRO-3 data parallelism (DESIGN.md §7): every rank holds 1/N of the float32
// master parameters, of the gradients and of the optimizer state, and gathers a unit's full
// parameters only while a step needs them.
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
// overlaps the current unit's compute. Gathered units stay resident until the end of the
// step (backward reads them) and are released afterwards: the memory is anonymous mmap'd
// regions whose pages are returned to the kernel with madvise(MADV_DONTNEED), so the
// process's RSS falls back between steps. The nn gradient buffer is such a region too: as
// soon as the gradient hook has seen every parameter of a unit, the unit's gradients are
// divided by N, copied into a padded send region, their pages released, and a
// reduce-scatter to the owners is issued while backward goes on. After the tape the
// reduced shards are added into the gradient shard and the optimizer steps on the shard.
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
package zero
