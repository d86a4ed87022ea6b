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
// A Program gathers each unit's parameters before its forward, prefetching the next unit,
// releases them after it where the graph allows and gathers them again for its backward;
// each unit's gradients go to their owners by a reduce-scatter issued while backward goes
// on (ReduceSchedule).
//
// On the host, after New the model's Data and Grad are placeholders of zeros: writing them
// is harmless and does not reach the shards (Engine.Model). Checkpoints (Engine.Save,
// Engine.Load, Consolidate) reshard to any world size and move between host and device.
//
// New is the one constructor, on the host (the default) and on a device (WithBackend); the
// engine, its Program and its checkpoints behave alike on both:
//
//	e, err := zero.New(ctx, m, ncclGroup, zero.WithBackend(devzero.NewBackend(dev)),
//		zero.WithOptimizer(zero.AdamW(1e-3)))
package zero
