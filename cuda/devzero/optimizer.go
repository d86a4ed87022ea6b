package devzero

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// shardOptimizer is the optimizer of the rank's shard. host is zero.WithOptimizer's
// optimizer over segments of a host copy of the shard (zero.Layout.Segments, as the host
// engine's). On the device it is an optim.Adam stepped by tape.Flat over the device shard,
// at the step count its BeginStep counts, and its host moments and master copy are a
// checkpoint's staging. Under offload it steps the pinned master shard itself.
type shardOptimizer struct {
	e      *Backend
	host   optim.Optimizer
	adam   *optim.Adam          // host, on the device
	segs   []optim.Segment      // host's, over master and grad
	starts []int                // where each segment starts in the shard
	state  map[string][]float32 // host's state buffers by kind (zero.HeapAlloc's)
	flat   *tape.Flat           // the device's update and moments (nil under offload)

	// offloaded: master and grad are pinned
	offload          bool
	pinM, pinG       *cuda.Pinned
	master, gradHost []float32
}

func newShardOptimizer(e *Backend, cfg zero.Config, shard []float32) (*shardOptimizer, error) {
	o := &shardOptimizer{e: e, offload: cfg.Offload == zero.OffloadCPU, state: map[string][]float32{}}
	if o.offload {
		var err error
		if o.pinM, err = e.dev.Pinned(4 * e.shardLen); err != nil {
			return nil, fmt.Errorf("pinned master shard (%d floats): %w", e.shardLen, err)
		}
		if o.pinG, err = e.dev.Pinned(4 * e.shardLen); err != nil {
			o.free()
			return nil, fmt.Errorf("pinned gradient shard (%d floats): %w", e.shardLen, err)
		}
		o.master, o.gradHost = o.pinM.Float32s()[:e.shardLen], o.pinG.Float32s()[:e.shardLen]
		clear(o.gradHost)
	} else {
		o.master, o.gradHost = make([]float32, e.shardLen), make([]float32, e.shardLen)
	}
	copy(o.master, shard)
	var err error
	if o.segs, o.starts, err = e.lay.Segments(e.model.Params, cfg.WeightDecay, o.master, o.gradHost); err != nil {
		o.free()
		return nil, err
	}
	workers := 1
	if o.offload {
		workers = cfg.Workers
	}
	if o.host, err = cfg.Optimizer(o.segs, zero.HeapAlloc{Workers: workers, State: o.state}); err != nil {
		o.free()
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	if o.offload {
		return o, nil
	}
	a, ok := o.host.(*optim.Adam)
	if !ok {
		o.free()
		return nil, fmt.Errorf("optimizer %T is not supported on the device (its kernel is optim.Adam's and AdamW's): use zero.AdamW, or zero.WithOffload(zero.OffloadCPU, workers) to step any optimizer on the CPU", o.host)
	}
	o.adam = a
	if o.flat, err = tape.NewFlat(e.dev, a, e.shardLen); err != nil {
		o.free()
		return nil, err
	}
	for i, sg := range o.segs {
		o.flat.AddRange(o.starts[i], o.starts[i]+len(sg.Data), sg.WeightDecay)
	}
	for _, kind := range o.flat.Kinds() {
		if o.state[kind] == nil {
			o.free()
			return nil, fmt.Errorf("optimizer state %s was not taken from the engine's allocator", kind)
		}
	}
	return o, nil
}

// steps is the number of optimizer steps taken.
func (o *shardOptimizer) steps() int64 {
	if s, ok := o.host.(interface{ Steps() int64 }); ok {
		return s.Steps()
	}
	return 0
}

// gradArrived is called once unit u's gradient shard is final in stream order: under
// offload it is copied to the pinned gradient shard on the compute stream, while later
// units still reduce.
func (o *shardOptimizer) gradArrived(u *zero.Unit) error {
	if !o.offload {
		return nil
	}
	e := o.e
	dst := hostPtr(o.gradHost[u.ShardBase:])
	return e.dev.Context().CopyDtoHAsync(dst, at(e.shardG, u.ShardBase), 4*u.Shard, e.dev.Stream())
}

// step updates the whole shard.
func (o *shardOptimizer) step(ctx context.Context) error {
	if o.offload {
		return o.stepCPU(ctx)
	}
	if err := o.begin(); err != nil {
		return err
	}
	return errors.Join(o.stepRange(0, o.e.shardLen), o.end())
}

// begin starts a device step: the host Adam counts it (BeginStep), and the device's
// scalars are optim's for its learning rate and step count; stepRange then updates pieces
// of the shard on the compute stream (disjoint pieces covering the shard are one whole
// step), and end closes the step.
func (o *shardOptimizer) begin() error {
	if err := o.adam.BeginStep(); err != nil {
		return err
	}
	return o.flat.Begin(o.adam.Steps())
}

func (o *shardOptimizer) stepRange(lo, hi int) error {
	return o.flat.StepRange(o.e.shardP, o.e.shardG, lo, hi)
}

func (o *shardOptimizer) end() error { return errors.Join(o.flat.End(), o.adam.EndStep()) }

// stepCPU waits for the gradient copies, steps the host optimizer and copies the master
// shard back to the device on the compute stream (the next Run's gathers are ordered after
// it).
func (o *shardOptimizer) stepCPU(ctx context.Context) error {
	e := o.e
	if err := e.dev.Synchronize(ctx); err != nil {
		return fmt.Errorf("waiting for the gradient shard's copy to the host: %w", err)
	}
	if err := o.host.Step(); err != nil {
		return err
	}
	if err := o.pinM.CopyTo(e.shardP); err != nil {
		return fmt.Errorf("master shard to the device: %w", err)
	}
	return nil
}

func (o *shardOptimizer) memory(m *Memory) {
	if o.offload {
		m.OptimizerHost = 2*4*o.e.shardLen + int(optim.StateBytes(o.host))
		return
	}
	m.OptimizerDevice = 4 * o.e.shardLen * len(o.flat.State())
}

func (o *shardOptimizer) free() {
	if o.flat != nil {
		o.flat.Free()
		o.flat = nil
	}
	for _, p := range []*cuda.Pinned{o.pinM, o.pinG} {
		if p != nil {
			p.Free()
		}
	}
	o.pinM, o.pinG = nil, nil
}
