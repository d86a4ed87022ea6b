package devzero

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// shardOptimizer is AdamW over the rank's shard: on the device (cuda's adam_f32 kernel over
// ranges of the shard, the scalars computed as optim's), or under offload optim's CPU AdamW
// over a pinned master shard and a pinned gradient shard.
type shardOptimizer struct {
	e         *Engine
	host      optim.Optimizer
	hyper     optim.Hyper
	decoupled bool
	ranges    []shardRange

	// on the device
	moments []*cuda.Tensor // exp_avg, exp_avg_sq (, max_exp_avg_sq)
	steps   int64
	lr      float64       // this step's
	k       cuda.AdamArgs // this step's scalars (Decay, WeightDecay per range)

	// offloaded
	offload          bool
	master, gradHost *cuda.Pinned
	cpu              *optim.Adam
}

// shardRange is elements [lo, hi) of the shard, of one weight decay.
type shardRange struct {
	lo, hi int
	wd     float64
}

func newShardOptimizer(e *Engine, host optim.Optimizer, shard []float32, offload bool) (*shardOptimizer, error) {
	h, ok := host.(*optim.Adam)
	if !ok {
		return nil, fmt.Errorf("the device ZeRO-3 optimizer is optim.Adam or AdamW, not %T", host)
	}
	o := &shardOptimizer{e: e, host: host, hyper: h.Hyper(), decoupled: h.Decoupled(), offload: offload}
	ps := e.model.Params
	for _, sg := range h.Segments() {
		if len(sg.Parts) == 0 {
			return nil, fmt.Errorf("optimizer segment %s names no parameters", sg.Name)
		}
		for _, pt := range sg.Parts {
			p := ps.Param(pt.Param)
			if p == nil {
				return nil, fmt.Errorf("optimizer segment %s: parameter %s is not the model's", sg.Name, pt.Param)
			}
			flo := p.Offset + pt.ParamOffset
			fhi := flo + pt.Len
			for _, u := range e.units {
				lo, hi := e.owned(u)
				a, z := max(lo, flo), min(hi, fhi)
				if a < z {
					o.add(shardRange{u.ShardBase + a - lo, u.ShardBase + z - lo, sg.WeightDecay})
				}
			}
		}
	}
	if offload {
		return o, o.offloadInit(shard)
	}
	kinds := 2
	if o.hyper.AMSGrad {
		kinds = 3
	}
	for range kinds {
		t, err := e.dev.Alloc(cuda.Float32, e.shardLen)
		if err == nil {
			err = e.dev.Zero(t)
		}
		if err != nil {
			o.free()
			return nil, fmt.Errorf("optimizer state (%d floats): %w", e.shardLen, err)
		}
		o.moments = append(o.moments, t)
	}
	return o, nil
}

// add appends r, merged with the last range when they touch and decay alike.
func (o *shardOptimizer) add(r shardRange) {
	if n := len(o.ranges); n > 0 && o.ranges[n-1].hi == r.lo && o.ranges[n-1].wd == r.wd {
		o.ranges[n-1].hi = r.hi
		return
	}
	o.ranges = append(o.ranges, r)
}

// offloadInit builds the CPU AdamW over pinned copies of the master and gradient shards.
func (o *shardOptimizer) offloadInit(shard []float32) error {
	e := o.e
	var err error
	if o.master, err = e.dev.Pinned(4 * e.shardLen); err != nil {
		return fmt.Errorf("pinned master shard (%d floats): %w", e.shardLen, err)
	}
	if o.gradHost, err = e.dev.Pinned(4 * e.shardLen); err != nil {
		return fmt.Errorf("pinned gradient shard (%d floats): %w", e.shardLen, err)
	}
	p, g := o.master.Float32s()[:e.shardLen], o.gradHost.Float32s()[:e.shardLen]
	copy(p, shard)
	clear(g)
	segs := make([]optim.Segment, 0, len(o.ranges))
	for _, r := range o.ranges {
		segs = append(segs, optim.Segment{Name: fmt.Sprintf("rank%d.shard[%d:%d]", e.rank, r.lo, r.hi),
			Data: p[r.lo:r.hi:r.hi], Grad: g[r.lo:r.hi:r.hi], WeightDecay: r.wd})
	}
	h := o.hyper
	opts := []optim.Option{optim.WithBetas(h.Beta1, h.Beta2), optim.WithEps(h.Eps)}
	if h.AMSGrad {
		opts = append(opts, optim.WithAMSGrad())
	}
	if h.Maximize {
		opts = append(opts, optim.WithMaximize())
	}
	newAdam := optim.NewAdam
	if o.decoupled {
		newAdam = optim.NewAdamW
	}
	if o.cpu, err = newAdam(segs, o.host.LR(), opts...); err != nil {
		return fmt.Errorf("the CPU AdamW of the shard: %w", err)
	}
	return nil
}

// gradArrived is called once unit u's gradient shard is final in stream order: under
// offload it is copied to the pinned gradient shard on the compute stream, while later
// units still reduce.
func (o *shardOptimizer) gradArrived(u *zero.Unit) error {
	if !o.offload {
		return nil
	}
	e := o.e
	dst := hostPtr(o.gradHost.Float32s()[u.ShardBase:])
	return e.dev.Context().CopyDtoHAsync(dst, at(e.shardG, u.ShardBase), 4*u.Shard, e.dev.Stream())
}

// step updates the shard (the learning rate read from the host optimizer).
func (o *shardOptimizer) step(ctx context.Context) error {
	if o.offload {
		return o.stepCPU(ctx)
	}
	o.begin()
	return o.stepRange(0, o.e.shardLen)
}

// begin computes a device step's scalars as optim's Adam does (step-dependent terms in
// float64, then rounded); stepRange then updates pieces of the shard.
func (o *shardOptimizer) begin() {
	o.lr = o.host.LR()
	// A schedule may move beta1 (OneCycleLR) as it moves the rate.
	if h, ok := o.host.(interface{ Hyper() optim.Hyper }); ok {
		o.hyper = h.Hyper()
	}
	o.steps++
	o.k = cuda.AdamArgs{AdamScalars: o.hyper.AdamStep(o.lr, o.steps), Decoupled: o.decoupled, Maximize: o.hyper.Maximize}
}

// stepRange updates the shard's elements within [lo, hi) on the compute stream: disjoint
// ranges covering the shard give one whole step.
func (o *shardOptimizer) stepRange(lo, hi int) error {
	e := o.e
	for _, r := range o.ranges {
		a, z := max(lo, r.lo), min(hi, r.hi)
		if a >= z {
			continue
		}
		views := make([]*cuda.Tensor, 0, 5)
		for _, t := range append([]*cuda.Tensor{e.shardP, e.shardG}, o.moments...) {
			v, err := t.View(a, z-a)
			if err != nil {
				return err
			}
			views = append(views, v)
		}
		k := o.k.WithWeightDecay(o.lr, r.wd)
		var vmax *cuda.Tensor
		if len(views) > 4 {
			vmax = views[4]
		}
		if err := e.dev.Adam(views[0], views[1], views[2], views[3], vmax, k); err != nil {
			return fmt.Errorf("shard elements [%d,%d): %w", a, z, err)
		}
	}
	return nil
}

// stepCPU waits for the gradient copies, steps the CPU AdamW and copies the master shard
// back to the device on the compute stream (the next Run's gathers are ordered after it).
func (o *shardOptimizer) stepCPU(ctx context.Context) error {
	e := o.e
	if err := e.dev.Synchronize(ctx); err != nil {
		return fmt.Errorf("waiting for the gradient shard's copy to the host: %w", err)
	}
	o.cpu.SetLR(o.host.LR())
	if h, ok := o.host.(interface{ Hyper() optim.Hyper }); ok {
		if err := o.cpu.SetMomentum(h.Hyper().Beta1); err != nil {
			return err
		}
	}
	if err := o.cpu.Step(); err != nil {
		return err
	}
	if err := o.master.CopyTo(e.shardP); err != nil {
		return fmt.Errorf("master shard to the device: %w", err)
	}
	return nil
}

func (o *shardOptimizer) memory(m *Memory) {
	n := 4 * o.e.shardLen
	if o.offload {
		kinds := 2
		if o.hyper.AMSGrad {
			kinds = 3
		}
		m.OptimizerHost = n * (2 + kinds)
		return
	}
	m.OptimizerDevice = n * len(o.moments)
}

func (o *shardOptimizer) free() {
	for _, t := range o.moments {
		t.Free()
	}
	o.moments = nil
	for _, p := range []*cuda.Pinned{o.master, o.gradHost} {
		if p != nil {
			p.Free()
		}
	}
	o.master, o.gradHost = nil, nil
}
