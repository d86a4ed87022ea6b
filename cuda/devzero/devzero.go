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
// A training Run: the compute stream records an event; every unit's all-gather is issued at
// once, in flat order, on the group's stream after that event (the prefetch runs as far
// ahead as the stream allows), each recording its own event, and the compute stream waits
// for all of them before the tape's first kernel (cuda/tape has no hook ahead of a node, so
// a unit's gather cannot be waited for just before its first reader). The tape then reads
// the gathered parameters in place and adds the gradients into a full-size device buffer;
// the gradient hook counts each unit's parameters and, when a unit is complete, records an
// event on the compute stream and issues the unit's reduce-scatter (sum) into the rank's
// gradient shard on the group's stream while the backward goes on. After the backward the
// compute stream waits for each reduction and divides the unit's shard by N; RunStep
// (train.Overlapped) steps each unit's shard with the device AdamW right after, while later
// units still reduce.
//
// Memory, honestly: the persistent state sharded 1/N is the parameter shard, the gradient
// shard and the optimizer's moments (Memory). The tape reads parameters from, and adds
// gradients into, one device buffer each the size of the whole model (a tape.State without
// optimizer), which stay allocated between steps: the device holds Ψ/N + Ψ floats of
// parameters, not Ψ/N plus the units in use, because a tape program's parameter addresses
// are fixed at compile time. The model-state saving over DDP on the device is therefore the
// optimizer state and the master copy (AdamW: 16Ψ bytes become 8Ψ + 16Ψ/N), not the
// working copies.
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
	key     func(string) string
	offload bool
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

	st       *tape.State  // full working buffers the tape reads and writes
	shardP   *cuda.Tensor // the rank's parameter shard
	shardG   *cuda.Tensor // the rank's gradient shard (reduced, divided by N)
	scratchP []*cuda.Tensor
	scratchG []*cuda.Tensor // by unit: padded copies for units whose padding overruns the buffer
	opt      *shardOptimizer

	start                    driver.Event
	gathered, ready, reduced []driver.Event
	pending                  []int
	isReady                  []bool
	order                    []int // units in reduce-scatter launch order
	gworks, rworks           []nccl.DeviceWork
	hookErr                  error
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
	cfg := config{key: zero.DepthKey(1)}
	for _, o := range opts {
		o(&cfg)
	}
	e := &Engine{dev: dev, model: m, coll: coll, rank: coll.Rank(), world: coll.Size()}
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
	var err error
	if e.st, err = tape.NewState(e.dev, e.model); err != nil {
		return fmt.Errorf("working buffers: %w", err)
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
	total := len(ps.Data)
	e.scratchP = make([]*cuda.Tensor, len(e.units))
	e.scratchG = make([]*cuda.Tensor, len(e.units))
	for i, u := range e.units {
		if u.Lo+u.Padded <= total {
			continue // the padding spills into the next unit, gathered after it
		}
		for _, t := range []**cuda.Tensor{&e.scratchP[i], &e.scratchG[i]} {
			if *t, err = e.dev.Alloc(cuda.Float32, u.Padded); err != nil {
				return fmt.Errorf("unit %s: padded buffer (%d floats): %w", u.Name, u.Padded, err)
			}
			if err := e.dev.Zero(*t); err != nil {
				return fmt.Errorf("unit %s: zeroing the padded buffer: %w", u.Name, err)
			}
		}
	}
	c := e.dev.Context()
	if e.start, err = c.EventCreate(false); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	for range e.units {
		for _, evs := range []*[]driver.Event{&e.gathered, &e.ready, &e.reduced} {
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

// State is the tape state holding the working (gathered) parameters and the gradients.
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
	// WorkingParams and WorkingGrads are the full-size device buffers the tape reads the
	// gathered parameters from and adds the gradients into; Padded the padded copies of
	// the units whose padding would overrun them.
	WorkingParams, WorkingGrads, Padded int
}

// Memory reports the bytes the engine holds.
func (e *Engine) Memory() Memory {
	m := Memory{ShardParams: 4 * e.shardP.Len(), ShardGrads: 4 * e.shardG.Len(),
		WorkingParams: 4 * e.st.Params().Len(), WorkingGrads: 4 * e.st.Grads().Len()}
	for i := range e.units {
		for _, t := range []*cuda.Tensor{e.scratchP[i], e.scratchG[i]} {
			if t != nil {
				m.Padded += 4 * t.Len()
			}
		}
	}
	e.opt.memory(&m)
	return m
}

// Close frees the engine's device memory and events. The device and the group are the
// caller's.
func (e *Engine) Close() {
	if e.opt != nil {
		e.opt.free()
	}
	for _, t := range append(append([]*cuda.Tensor{e.shardP, e.shardG}, e.scratchP...), e.scratchG...) {
		if t != nil {
			t.Free()
		}
	}
	if e.st != nil {
		e.st.Close()
		e.st = nil
	}
	c := e.dev.Context()
	for _, ev := range append(append(append([]driver.Event{e.start}, e.gathered...), e.ready...), e.reduced...) {
		if ev != 0 {
			_ = c.EventDestroy(ev)
		}
	}
	e.start, e.gathered, e.ready, e.reduced = 0, nil, nil, nil
}

// at is the device address of element i of t (which may lie past t's end: the caller knows
// the allocation holds it).
func at(t *cuda.Tensor, i int) driver.DevPtr { return t.Ptr() + driver.DevPtr(4*i) }

// gatherAll issues every unit's all-gather after the compute stream's work so far and makes
// the compute stream wait for them all.
func (e *Engine) gatherAll(ctx context.Context) error {
	c, s := e.dev.Context(), e.dev.Stream()
	if err := c.EventRecord(e.start, s); err != nil {
		return fmt.Errorf("devzero: rank %d: recording the start event: %w", e.rank, err)
	}
	e.gworks = e.gworks[:0]
	for i, u := range e.units {
		dst := at(e.st.Params(), u.Lo)
		if e.scratchP[i] != nil {
			dst = e.scratchP[i].Ptr()
		}
		e.gworks = append(e.gworks, e.coll.AllGatherDeviceAfter(dst, at(e.shardP, u.ShardBase), u.Shard, libnccl.Float32, e.start, e.gathered[i]))
	}
	for i, w := range e.gworks {
		u := e.units[i]
		select {
		case <-w.Enqueued():
		case <-ctx.Done():
			return fmt.Errorf("devzero: rank %d: waiting for unit %s's all-gather to be enqueued: %w", e.rank, u.Name, ctx.Err())
		}
		if err := c.StreamWaitEvent(s, e.gathered[i]); err != nil {
			return fmt.Errorf("devzero: rank %d: waiting for unit %s's all-gather: %w", e.rank, u.Name, err)
		}
		if e.scratchP[i] != nil {
			if err := c.CopyDtoDAsync(at(e.st.Params(), u.Lo), e.scratchP[i].Ptr(), 4*(u.Hi-u.Lo), s); err != nil {
				return fmt.Errorf("devzero: rank %d: unit %s from its padded buffer: %w", e.rank, u.Name, err)
			}
		}
	}
	return nil
}

// waitGathers waits for the all-gathers to end and reports their errors.
func (e *Engine) waitGathers(ctx context.Context) error {
	var errs []error
	for i, w := range e.gworks {
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("all-gather of unit %s: %w", e.units[i].Name, err))
		}
	}
	e.gworks = e.gworks[:0]
	if len(errs) > 0 {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, errors.Join(errs...))
	}
	return nil
}

// ParamsToHost gathers every unit and copies the full parameters into the model's
// ParamSet.Data (a checkpoint, a check). It is collective: every rank calls it.
func (e *Engine) ParamsToHost(ctx context.Context) error {
	err := e.gatherAll(ctx)
	if werr := e.waitGathers(ctx); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	if err := e.st.ParamsToHost(ctx); err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
	return nil
}

// ZeroGrad zeroes the working gradient buffer and the gradient shard.
func (e *Engine) ZeroGrad() error {
	if err := e.st.ZeroGrad(); err != nil {
		return fmt.Errorf("devzero: rank %d: %w", e.rank, err)
	}
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
