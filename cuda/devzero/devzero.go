// Package devzero is ZeRO-3 on CUDA devices (docs/DESIGN.md §9, "ZeRO-3 on the device"): each
// rank keeps 1/N of the parameters, of the gradients and of the AdamW state on its device,
// all-gathers the parameter units with NCCL before they are read and reduce-scatters each
// unit's gradients as soon as the backward has produced them.
//
//	host, err := optim.NewAdamW(segs, lr)              // the hyperparameters and the LR
//	e, err := devzero.New(dev, model, group, host)      // group: an nccl.Group on dev
//	p, err := e.Compile(build)
//	for each batch { p.SetInput(...); err = train.RunStep(ctx, p) }
//	err = e.ParamsToHost(ctx)                           // collective: the full parameters
//
// The units and the shards are parallel/zero's (zero.Unit): the flat parameter buffer is
// cut into units by a key of the parameters' names (zero.DepthKey(1) by default), each unit
// padded to a multiple of the world size N, and rank r owns elements [r·Shard,
// (r+1)·Shard) of every unit, which is what NCCL's equal-count all-gather and reduce-scatter
// move.
//
// A training Run gathers a unit just before its first reader, ahead of use: cuda/tape's unit
// hooks (tape.NewUnitState) call the engine right before the first step that reads a unit's
// parameters and right after the last, in forward and again in backward. At "need unit u"
// the engine issues the all-gathers of the next WithPrefetch units of the program's
// schedule (tape.Program.UnitSchedule) into blocks from the device's caching allocator, on
// the group's stream after an event of the compute stream, and makes the compute stream
// wait for u's; at "done with unit u" u's block is freed (the cache orders its reuse after
// the kernels that read it). As parallel/zero on the CPU, a unit is freed after its last
// forward reader and gathered again before its first backward reader (a unit needed again
// within the prefetch window stays, as the last unit between forward and backward).
// Gradients are added into a zeroed per-unit block; when the backward has handed over a
// unit's last gradient, the compute stream records an event and the unit's reduce-scatter
// (sum) is issued on the group's stream into a shard-sized block while the backward goes
// on; at the next unit's reduction (or after the backward) the compute stream waits for
// it, frees the gradient block and adds the result divided by N into the rank's gradient
// shard (gradients accumulate there until Step or ZeroGrad). RunStep (train.Overlapped)
// steps each unit's shard with the device AdamW right after, while later units still
// reduce.
//
// Memory: the persistent state is the parameter shard, the gradient shard and the
// optimizer's moments, 1/N each (plus under N elements of padding per unit); during a Run
// the device holds the gathered parameters of the units in use and prefetched (about
// 1+WithPrefetch units) and the gradient blocks of the units being reduced, not Ψ: Memory
// reports the peaks.
//
// WithOffloadCPU keeps the master shard and the AdamW moments in host memory: each unit's
// gradient shard is copied into pinned host memory on the compute stream as soon as its
// reduction has ended (while later units still reduce), Step runs the CPU AdamW of package
// optim on the shard and copies the updated master shard back to the device asynchronously,
// ahead of the next Run's gathers.
package devzero

import (
	"context"
	"errors"
	"fmt"
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

// Collectives moves device memory in stream order: nccl.Group's device collectives.
type Collectives interface {
	AllGatherDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, wait, done driver.Event) nccl.DeviceWork
	ReduceScatterDeviceAfter(dst, src driver.DevPtr, count int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) nccl.DeviceWork
	Rank() int
	Size() int
}

// Option configures New.
type Option func(*config)

type config struct {
	key      func(string) string
	offload  bool
	prefetch int
	trace    func(TraceEvent)
}

// WithUnitKey cuts the parameters into units by key (zero.WithUnitKey's meaning).
func WithUnitKey(key func(name string) string) Option { return func(c *config) { c.key = key } }

// WithUnitDepth groups parameters by the first depth components of their names
// (zero.DepthKey; default 1).
func WithUnitDepth(depth int) Option {
	return func(c *config) { c.key = zero.DepthKey(max(depth, 1)) }
}

// WithOffloadCPU keeps the master shard and the optimizer state in host memory and steps
// them with the CPU AdamW (package optim), the gradient shard copied to pinned memory.
func WithOffloadCPU() Option { return func(c *config) { c.offload = true } }

// WithPrefetch sets how many units of the schedule ahead of the one needed are gathered
// (1 by default; 0 gathers each unit only when it is needed). Each adds a unit's gathered
// parameters to the device's peak.
func WithPrefetch(units int) Option { return func(c *config) { c.prefetch = max(units, 0) } }

// TraceEvent is what WithTrace reports: Kind is "gather" (a unit's all-gather issued),
// "need" (the tape is about to run the unit's first reader of the phase), "done" (its last
// reader was enqueued) or "reduce" (the unit's reduce-scatter issued; Phase is Backward).
type TraceEvent struct {
	Kind  string
	Unit  int
	Phase tape.Phase
}

// WithTrace calls f, on the Run's goroutine, at every gather, need, done and reduce of a
// Run (tests, diagnostics).
func WithTrace(f func(TraceEvent)) Option { return func(c *config) { c.trace = f } }

// Engine is one rank's device ZeRO-3 state. It is driven from one goroutine, as the
// device's stream is; every rank calls the same methods in the same order (Run, Step,
// ParamsToHost are collective).
type Engine struct {
	dev         *cuda.Device
	model       *nn.Model
	coll        Collectives
	rank, world int
	units       []*zero.Unit
	unitOf      []int // by Param.Index
	shardLen    int

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
	pending        []int
	isReady        []bool
	order          []int // units in reduce-scatter launch order
	retired        int   // order[:retired] are added into the shard
	rworks         []nccl.DeviceWork
	ranged, began  bool
	hookErr        error
}

// New makes rank coll.Rank()'s device ZeRO-3 state of m on dev: m's parameters (which
// must be equal on every rank: broadcast them first, or build every rank's model from the
// same seed) are copied to the device and this rank's shard kept, and host (an optim.Adam or
// AdamW over segments of m's ParamSet) gives the hyperparameters, each segment's weight
// decay and, at every Step, the learning rate. The device optimizer starts from zero
// moments. coll works on dev's context (an nccl.Group made WithDevice(dev.Ordinal())).
func New(dev *cuda.Device, m *nn.Model, coll Collectives, host optim.Optimizer, opts ...Option) (*Engine, error) {
	if dev == nil || m == nil || m.Params == nil || coll == nil || host == nil {
		return nil, fmt.Errorf("devzero: nil device, model, collectives or optimizer")
	}
	cfg := config{key: zero.DepthKey(1), prefetch: 1}
	for _, o := range opts {
		o(&cfg)
	}
	e := &Engine{dev: dev, model: m, coll: coll, rank: coll.Rank(), world: coll.Size(), prefetch: cfg.prefetch, trace: cfg.trace}
	if e.world < 1 || e.rank < 0 || e.rank >= e.world {
		return nil, fmt.Errorf("devzero: rank %d outside world size %d", e.rank, e.world)
	}
	e.layout(m.Params, cfg.key)
	if err := e.allocate(host, cfg.offload); err != nil {
		e.Close()
		return nil, fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	return e, nil
}

// layout cuts the flat buffer into units as parallel/zero does.
func (e *Engine) layout(ps *nn.ParamSet, key func(string) string) {
	e.unitOf = make([]int, len(ps.Params))
	params := append([]*nn.Param(nil), ps.Params...)
	for i := 1; i < len(params); i++ { // insertion sort by offset (few parameters)
		for j := i; j > 0 && params[j].Offset < params[j-1].Offset; j-- {
			params[j], params[j-1] = params[j-1], params[j]
		}
	}
	seen := map[string]int{}
	var cur *zero.Unit
	curKey := ""
	for _, p := range params {
		k := key(p.Name)
		if cur == nil || k != curKey {
			name := k
			if n := seen[k]; n > 0 {
				name = fmt.Sprintf("%s#%d", k, n)
			}
			seen[k]++
			cur = &zero.Unit{Name: name, Lo: p.Offset, Hi: p.Offset}
			curKey = k
			e.units = append(e.units, cur)
		}
		cur.Params = append(cur.Params, p)
		cur.Hi = p.Offset + p.Numel()
		e.unitOf[p.Index] = len(e.units) - 1
	}
	gather := 0
	for _, u := range e.units {
		u.Padded = (u.Hi - u.Lo + e.world - 1) / e.world * e.world
		u.Shard = u.Padded / e.world
		u.ShardBase, u.GatherBase = e.shardLen, gather
		e.shardLen += u.Shard
		gather += u.Padded
	}
}

// owned is the flat range [lo, hi) of u this rank owns (empty when it owns only padding).
func (e *Engine) owned(u *zero.Unit) (lo, hi int) {
	lo = u.Lo + e.rank*u.Shard
	hi = min(lo+u.Shard, u.Hi)
	return lo, max(lo, hi)
}

func (e *Engine) allocate(host optim.Optimizer, offload bool) error {
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
		lo, hi := e.owned(u)
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
	e.gradBlk, e.rsDst, e.rworks = make([]*cuda.Tensor, n), make([]*cuda.Tensor, n), make([]nccl.DeviceWork, n)
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
	if e.opt, err = newShardOptimizer(e, host, shard, offload); err != nil {
		return err
	}
	return nil
}

// Units are the gather units, in flat order.
func (e *Engine) Units() []*zero.Unit { return e.units }

// State is the unit state (tape.NewUnitState) the engine's programs are compiled on.
func (e *Engine) State() *tape.State { return e.st }

// Memory is the bytes an Engine holds, by what for.
type Memory struct {
	// ShardParams and ShardGrads are the rank's shards on the device (4·Σ Shard bytes each).
	ShardParams, ShardGrads int
	// OptimizerDevice is the AdamW moments on the device (0 under WithOffloadCPU).
	OptimizerDevice int
	// OptimizerHost is the master shard and the moments in host memory, with the pinned
	// gradient shard (WithOffloadCPU; else 0).
	OptimizerHost int
	// Gathered and GradBlocks are the bytes of gathered parameter blocks and of gradient
	// blocks held now (4·Padded per unit; 0 between Runs); PeakGathered and PeakGradBlocks
	// the most held at once since New.
	Gathered, GradBlocks, PeakGathered, PeakGradBlocks int
}

// Memory reports the bytes the engine holds.
func (e *Engine) Memory() Memory {
	m := Memory{ShardParams: 4 * e.shardP.Len(), ShardGrads: 4 * e.shardG.Len(),
		Gathered: e.live[0], GradBlocks: e.live[1], PeakGathered: e.peak[0], PeakGradBlocks: e.peak[1]}
	e.opt.memory(&m)
	return m
}

// Close frees the engine's device memory and events. The device and the group are the
// caller's.
func (e *Engine) Close() {
	if e.opt != nil {
		e.opt.free()
	}
	e.freeBlocks()
	for _, t := range []*cuda.Tensor{e.shardP, e.shardG} {
		if t != nil {
			t.Free()
		}
	}
	if e.st != nil {
		e.st.Close()
		e.st = nil
	}
	c := e.dev.Context()
	for _, ev := range append(append(append(append([]driver.Event(nil), e.gwait...), e.gathered...), e.ready...), e.reduced...) {
		if ev != 0 {
			_ = c.EventDestroy(ev)
		}
	}
	e.gwait, e.gathered, e.ready, e.reduced = nil, nil, nil, nil
}

// at is the device address of element i of t (which may lie past t's end: the caller knows
// the allocation holds it).
func at(t *cuda.Tensor, i int) driver.DevPtr { return t.Ptr() + driver.DevPtr(4*i) }

// ParamsToHost gathers every unit, one at a time, and copies the full parameters into the
// model's ParamSet.Data (a checkpoint, a check). It is collective: every rank calls it.
func (e *Engine) ParamsToHost(ctx context.Context) error {
	data := e.model.Params.Data
	for i, u := range e.units {
		blk, w, err := e.gather(i)
		if err == nil {
			err = e.await(ctx, i, w)
		}
		var v *cuda.Tensor
		if err == nil {
			v, err = blk.View(0, u.Hi-u.Lo)
		}
		if err == nil {
			err = v.CopyTo(ctx, data[u.Lo:u.Hi])
		}
		if w != nil {
			err = errors.Join(err, w.Wait(ctx))
		}
		if blk != nil {
			blk.Free()
		}
		if err != nil {
			return fmt.Errorf("devzero: rank %d: unit %s to the host: %w", e.rank, u.Name, err)
		}
	}
	return nil
}

// ZeroGrad zeroes the gradient shard (the gradient blocks live only within a Run).
func (e *Engine) ZeroGrad() error {
	if err := e.dev.Zero(e.shardG); err != nil {
		return fmt.Errorf("devzero: rank %d: zeroing the gradient shard: %w", e.rank, err)
	}
	return nil
}

// hostPtr is the address of b's first element.
func hostPtr(b []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// GradShard copies the rank's gradient shard (Σ Shard floats, unit by unit: unit u's at
// u.ShardBase, the rank's elements [rank·Shard, (rank+1)·Shard) of the unit, padding
// included) to the host. It waits for the device.
func (e *Engine) GradShard(ctx context.Context) ([]float32, error) {
	g, err := e.shardG.ToHost(ctx)
	if err != nil {
		return nil, fmt.Errorf("devzero: rank %d: gradient shard to the host: %w", e.rank, err)
	}
	return g, nil
}
