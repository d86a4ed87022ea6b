// Package devzero is ZeRO-3's device backend (docs/DESIGN.md §9, "ZeRO-3 on the device"):
// parallel/zero's engine with each rank's 1/N of the parameters, of the gradients and of the
// optimizer state on its CUDA device, the parameter units all-gathered with NCCL before
// they are read and each unit's gradients reduce-scattered as soon as the backward has
// produced them.
//
//	be := devzero.NewBackend(dev)
//	e, err := zero.New(ctx, model, group,               // group: an nccl.Group on dev
//		zero.WithBackend(be), zero.WithOptimizer(zero.AdamW(lr)), zero.WithWeightDecay(wd))
//	p, err := e.Compile(build)
//	for each batch { p.SetInput(...); err = train.RunStep(ctx, p) }
//	err = e.Save(ctx, dir, tag)                          // collective: parallel/zero's format
//
// The engine is zero.New's, with its options, names and contracts (it checks the models,
// broadcasts rank 0's and cuts the units and shards, zero.Layout); the Backend keeps the
// shards and runs the programs, the gradient shard's operations included. What exists only
// on the device is the Backend's (Memory, SetTrace, State). Checkpoints are zero's
// (Checkpoint), so one resumes bit-identically on either backend and, resharded, at another
// world size.
//
// A training Run gathers and reduce-scatters the units as docs/DESIGN.md §9 says. Its
// gradient schedule is zero.ReduceSchedule's, waiting for every parameter of a unit where
// the host waits for those the program uses: a unit holding a parameter that does not reach
// the loss reduces after the backward, not beside it.
//
// The optimizer is zero.WithOptimizer's, built over the rank's shard in host memory as the
// host engine builds it: on the device optim.Adam or AdamW (zero.AdamW), stepped by a device
// kernel with the host optimizer's scalars; under zero.WithOffload(zero.OffloadCPU, workers)
// any optimizer of package optim, on a pinned host master shard. zero.SyncBatchNorm sums the
// BatchNorm statistics over the group on the host (cuda/tape's Note [SyncBatchNorm on the
// device]). Accept refuses the host engine's disk options, naming them.
package devzero

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// Collectives is the engine's group: comm.Group's host collectives (the model check, the
// broadcast, the agreement check, the checkpoint's barriers) and device collectives in
// stream order. nccl.Group has both.
type Collectives interface {
	comm.Group
	AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) nccl.DeviceWork
	ReduceScatterDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) nccl.DeviceWork
}

var _ zero.Backend = (*Backend)(nil)

// TraceEvent is what SetTrace reports: Kind is "gather" (a unit's all-gather issued),
// "need" (the tape is about to run the unit's first reader of the phase), "done" (its last
// reader was enqueued) or "reduce" (the unit's reduce-scatter issued; Phase is Backward).
type TraceEvent struct {
	Kind  string
	Unit  int
	Phase tape.Phase
}

// SetTrace makes every later Run call f, on the Run's goroutine, at every gather, need,
// done and reduce (tests, diagnostics); nil stops it.
func (e *Backend) SetTrace(f func(TraceEvent)) { e.trace = f }

// Backend is zero.Backend on a CUDA device: one rank's shards, optimizer and programs on
// the device. Give it to one engine (zero.WithBackend), which drives it from one goroutine,
// as the device's stream is, and closes it; every rank calls the same methods in the same
// order (zero.New, Run, Step, GatherParams and Save are collective).
type Backend struct {
	dev         *cuda.Device
	model       *nn.Model
	coll        Collectives
	rank, world int
	lay         *zero.Layout
	units       []*zero.Unit // lay.Units()
	shardLen    int          // lay.ShardLen()
	syncBN      bool
	closed      bool

	st       *tape.State  // a unit state: the tape reads the blocks the hooks hand it
	shardP   *cuda.Tensor // the rank's parameter shard
	shardG   *cuda.Tensor // the rank's gradient shard (reduced, divided by N, accumulated)
	opt      *shardOptimizer
	prefetch int
	trace    func(TraceEvent)

	gwait, gathered, ready, reduced []driver.Event // by unit

	// A Run's (gather.go): the schedule's Needs, the next to come and the next to issue.
	ctx            context.Context
	needs          []tape.UnitEvent
	needPos, issue int
	blocks         []*cuda.Tensor    // by unit: gathered parameters, while in use
	pend           []nccl.DeviceWork // by unit: the gather the next Need waits for
	keep           []bool            // by unit: its next Need is within the prefetch window
	gworks         []gatherWork      // this Run's gathers, waited at its end
	gradBlk, rsDst []*cuda.Tensor    // by unit: gradient block, reduce-scatter result
	live, peak     [2]int            // bytes of parameter and gradient blocks: now, most
	red            *zero.ReduceSchedule[nccl.DeviceWork]
	ranged, began  bool // a RunStep's update of each unit as it retires; begun
}

// NewBackend returns the device backend on dev, for zero.WithBackend. The engine's group
// must be an nccl.Group on dev's context (made WithDevice(dev.Ordinal())), or another
// Collectives. The device is the caller's, to close after the engine.
func NewBackend(dev *cuda.Device) *Backend { return &Backend{dev: dev} }

// Accept takes the engine's group and options (zero.Backend): it refuses a group without
// device collectives (Collectives), a backend already given to an engine, and, naming
// them, the options the device does not honour.
func (e *Backend) Accept(g comm.Group, cfg zero.Config) error {
	const backend = "the device backend (cuda/devzero)"
	coll, ok := g.(Collectives)
	switch {
	case e.dev == nil:
		return fmt.Errorf("%s: no device: make it with devzero.NewBackend(dev)", backend)
	case e.coll != nil:
		return fmt.Errorf("%s: already given to an engine: make one backend per engine", backend)
	case !ok:
		return fmt.Errorf("%s: the group (%T) has no device collectives: give zero.New an nccl.Group made WithDevice(%d)", backend, g, e.dev.Ordinal())
	case cfg.Offload == zero.OffloadDisk:
		return fmt.Errorf("zero.WithOffload(zero.OffloadDisk, ...) is not supported by %s: use zero.OffloadCPU, or the host engine (no zero.WithBackend) for disk offload", backend)
	case cfg.DiskMaster:
		return fmt.Errorf("zero.DiskMaster is not supported by %s (it keeps nothing on disk): use the host engine (no zero.WithBackend) for disk offload", backend)
	case cfg.Dir != "":
		return fmt.Errorf("zero.WithOffloadDir(%q) is not supported by %s (it keeps nothing on disk): leave it out, or use the host engine", cfg.Dir, backend)
	}
	e.coll = coll
	return nil
}

// Open keeps this rank's shard of m's parameters (rank 0's, zero.New broadcast them) on the
// device and builds the optimizer over it (zero.Backend). m's ParamSet keeps its full Data,
// which training does not read or write (GatherParams returns the parameters).
func (e *Backend) Open(_ context.Context, m *nn.Model, g comm.Group, lay *zero.Layout, cfg zero.Config) error {
	e.model, e.rank, e.world, e.prefetch = m, g.Rank(), g.Size(), cfg.Prefetch
	e.syncBN = cfg.SyncBN
	e.lay, e.units, e.shardLen = lay, lay.Units(), lay.ShardLen()
	if err := e.allocate(cfg); err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	return nil
}

func (e *Backend) who() string { return fmt.Sprintf("devzero: rank %d", e.rank) }

func (e *Backend) allocate(cfg zero.Config) error {
	ps := e.model.Params
	units := make([]tape.Unit, len(e.units))
	for i, u := range e.units {
		units[i] = tape.Unit{Lo: u.Lo, Hi: u.Hi}
	}
	var err error
	if e.st, err = tape.NewUnitState(e.dev, e.model, units, unitHooks{e}); err != nil {
		return fmt.Errorf("unit state: %w", err)
	}
	shard := make([]float32, e.shardLen)
	for _, u := range e.units {
		lo, hi := e.lay.Owned(u)
		copy(shard[u.ShardBase:], ps.Data[lo:hi])
	}
	if e.shardP, err = e.dev.FromHost(shard, e.shardLen); err != nil {
		return fmt.Errorf("parameter shard (%d floats): %w", e.shardLen, err)
	}
	if e.shardG, err = e.dev.Alloc(cuda.Float32, e.shardLen); err != nil {
		return fmt.Errorf("gradient shard (%d floats): %w", e.shardLen, err)
	}
	if err := e.dev.Zero(e.shardG); err != nil {
		return fmt.Errorf("zeroing the gradient shard: %w", err)
	}
	n := len(e.units)
	e.blocks, e.pend, e.keep = make([]*cuda.Tensor, n), make([]nccl.DeviceWork, n), make([]bool, n)
	e.gradBlk, e.rsDst = make([]*cuda.Tensor, n), make([]*cuda.Tensor, n)
	e.red = zero.NewReduceSchedule[nccl.DeviceWork](e.lay, e.model.Params.Params, reducer{e}, true)
	c := e.dev.Context()
	for range e.units {
		for _, evs := range []*[]driver.Event{&e.gwait, &e.gathered, &e.ready, &e.reduced} {
			ev, err := c.EventCreate(false)
			if err != nil {
				return fmt.Errorf("unit events: %w", err)
			}
			*evs = append(*evs, ev)
		}
	}
	e.opt, err = newShardOptimizer(e, cfg, shard)
	return err
}

// Optimizer is the shard's optimizer, the one zero.WithOptimizer built: a scheduler sets
// its learning rate, and its step count is the device's. Step the engine (Engine.Step,
// Program.Step, RunStep), not it.
func (e *Backend) Optimizer() optim.Optimizer { return e.opt.host }

// State is the unit state (tape.NewUnitState) the engine's programs are compiled on; nil
// before zero.New opened the backend.
func (e *Backend) State() *tape.State { return e.st }

// Memory is the bytes a Backend holds on the device and in host memory, by what for.
type Memory struct {
	// ShardParams and ShardGrads are the rank's shards on the device (4·Σ Shard bytes each).
	ShardParams, ShardGrads int
	// OptimizerDevice is the AdamW moments on the device (0 under OffloadCPU).
	OptimizerDevice int
	// OptimizerHost is, under OffloadCPU, the pinned master and gradient shards and the
	// optimizer's state in host memory; else 0 (the host staging of a checkpoint is
	// written only by Save and Load).
	OptimizerHost int
	// Gathered and GradBlocks are the bytes of gathered parameter blocks and of gradient
	// blocks held now (4·Padded per unit; 0 between Runs); PeakGathered and PeakGradBlocks
	// the most held at once since zero.New.
	Gathered, GradBlocks, PeakGathered, PeakGradBlocks int
}

// Memory reports the bytes the backend holds.
func (e *Backend) Memory() Memory {
	m := Memory{ShardParams: 4 * e.shardP.Len(), ShardGrads: 4 * e.shardG.Len(),
		Gathered: e.live[0], GradBlocks: e.live[1], PeakGathered: e.peak[0], PeakGradBlocks: e.peak[1]}
	e.opt.memory(&m)
	return m
}

// CountMemory is zero.Backend's: the shards and the optimizer state on the device and,
// under OffloadCPU, their pinned host copies; the step's peak adds the most gathered
// parameter and gradient blocks held at once (Memory).
func (e *Backend) CountMemory(m *zero.Memory) {
	d := e.Memory()
	pinned := int64(0)
	if e.opt.offload {
		pinned = 4 * int64(e.shardLen)
	}
	m.MasterBytes, m.GradBytes = int64(d.ShardParams)+pinned, int64(d.ShardGrads)+pinned
	m.StateBytes = int64(d.OptimizerDevice+d.OptimizerHost) - 2*pinned
	m.PeakStepBytes = m.ModelStateBytes() + int64(d.PeakGathered+d.PeakGradBlocks)
}

// Close frees the backend's device memory and events; programs compiled from it must not
// run afterwards. The device and the group are the caller's.
func (e *Backend) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	if e.dev == nil {
		return nil
	}
	if e.opt != nil {
		e.opt.free()
	}
	e.freeBlocks()
	e.shardP.Free()
	e.shardG.Free()
	if e.st != nil {
		e.st.Close()
		e.st = nil
	}
	c := e.dev.Context()
	var errs []error
	for _, ev := range append(append(append(append([]driver.Event(nil), e.gwait...), e.gathered...), e.ready...), e.reduced...) {
		if ev != 0 {
			errs = append(errs, c.EventDestroy(ev))
		}
	}
	e.gwait, e.gathered, e.ready, e.reduced = nil, nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devzero: rank %d: close: %w", e.rank, err)
	}
	return nil
}

// at is the device address of element i of t (which may lie past t's end: the caller knows
// the allocation holds it).
func at(t *cuda.Tensor, i int) driver.DevPtr { return t.Ptr() + driver.DevPtr(4*i) }

// GatherParams all-gathers the full parameters, one unit at a time, into a new buffer with
// nn.ParamSet's layout (parameter p is out[p.Offset:p.Offset+p.Numel()]), as
// zero.Engine.GatherParams. Every rank must call it (through the engine).
func (e *Backend) GatherParams(ctx context.Context) ([]float32, error) {
	out := make([]float32, e.model.Params.NumParams())
	for i, u := range e.units {
		blk, w, err := e.gather(i)
		if err == nil {
			err = nccl.StreamWait(ctx, e.dev.Context(), e.dev.Stream(), w, e.gathered[i], "all-gather")
		}
		var v *cuda.Tensor
		if err == nil {
			v, err = blk.View(0, u.Hi-u.Lo)
		}
		if err == nil {
			err = v.CopyTo(ctx, out[u.Lo:u.Hi])
		}
		if w != nil {
			err = errors.Join(err, w.Wait(ctx))
		}
		blk.Free()
		if err != nil {
			return nil, fmt.Errorf("devzero: rank %d: unit %s to the host: %w", e.rank, u.Name, err)
		}
	}
	return out, nil
}

// ZeroGrad zeroes the gradient shard (the gradient blocks live only within a Run).
// Call it through the engine (Engine.ZeroGrad).
func (e *Backend) ZeroGrad() error {
	if err := e.dev.Zero(e.shardG); err != nil {
		return fmt.Errorf("devzero: rank %d: zeroing the gradient shard: %w", e.rank, err)
	}
	return nil
}

// hostPtr is the address of b's first element.
func hostPtr(b []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// Step applies the optimizer to the whole shard (Engine.Step): the device AdamW or, under
// OffloadCPU, the optimizer on the CPU.
func (e *Backend) Step(ctx context.Context) error { return e.opt.step(ctx) }

// Steps is the optimizer's step count (zero.Backend).
func (e *Backend) Steps() int64 { return e.opt.steps() }

// ShardGrad is zero.Engine.ShardGrad: the rank's gradient shard copied to the host (under
// zero.OffloadCPU, the pinned host copy the optimizer steps from, which the gradient
// operations change). It waits for the device.
func (e *Backend) ShardGrad(ctx context.Context) ([]float32, error) {
	if e.opt.offload {
		g, err := e.shardHost(ctx)
		return slices.Clone(g), err
	}
	g, err := e.shardG.ToHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("devzero: rank %d: gradient shard to the host: %w", e.rank, err)
	}
	return g, nil
}

// ShardParams is zero.Engine.ShardParams: the rank's master shard copied to the host. It
// waits for the device.
func (e *Backend) ShardParams(ctx context.Context) ([]float32, error) {
	p, err := e.shardP.ToHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("devzero: rank %d: parameter shard to the host: %w", e.rank, err)
	}
	return p, nil
}
