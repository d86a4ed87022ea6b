package zero

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
)

// Program is a model compiled for ZeRO-3: its graph gathers each unit's parameters before
// use and its gradient hook reduce-scatters each unit's gradients to their owners.
type Program struct {
	e        *Engine
	np       *nn.Program
	training bool
	order    []int // units in order of first use (forward order)
	pos      []int // by unit: index in order, -1 when unused
	needed   []int // by unit: used parameters whose gradient closes the unit
	st       stepState
	stats    StepStats
}

// StepStats is what the last Run measured.
type StepStats struct {
	// Run is the wall time of the run.
	Run time.Duration
	// GatherWait is the time the forward spent blocked on all-gathers not yet complete (the
	// part of parameter communication that prefetch did not hide).
	GatherWait time.Duration
	// ReduceWait is the time spent after the tape waiting for reduce-scatters.
	ReduceWait time.Duration
	// PeakBytes is the largest model-state footprint sampled during the run: persistent
	// state plus resident gathered parameters, full-size gradients and reduce-scatter
	// buffers (sampled at every reduce-scatter launch and at the end of the tape).
	PeakBytes int64
}

type stepState struct {
	ctx    context.Context
	gw     []comm.Work // by unit: all-gather
	waited []bool
	rw     []comm.Work // by unit: reduce-scatter
	count  []int
	err    error
}

// Compile builds the model with build for ZeRO-3. opts are nn build options (autocast,
// Training(false) for an evaluation program, more hooks); do not pass nn.WithGradBuffer.
// Programs of in-process ranks may be compiled concurrently (nn.Compile serialises).
func (e *Engine) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	if e.closed {
		return nil, ErrClosed
	}
	nu := len(e.lay.units)
	p := &Program{e: e, pos: make([]int, nu), needed: make([]int, nu)}
	for i := range p.pos {
		p.pos[i] = -1
	}
	all := []nn.BuildOption{nn.WithParamHook(p.gatherHook)}
	all = append(all, opts...)
	all = append(all, nn.WithGradHook(p.onGrad))
	if e.cfg.syncBN {
		all = append(all, nn.WithStatsReducer(statsReducer{p}))
	}
	np, err := nn.Compile(e.Model, build, all...)
	if err != nil {
		return nil, fmt.Errorf("zero: rank %d: compile: %w", e.rank, err)
	}
	p.np = np
	p.training = np.Builder.Training() && np.Loss != nil
	if p.training {
		for _, prm := range np.Builder.UsedParams() {
			p.needed[e.lay.unitOf[prm.Index]]++
		}
	}
	p.st = stepState{gw: make([]comm.Work, nu), waited: make([]bool, nu), rw: make([]comm.Work, nu), count: make([]int, nu)}
	return p, nil
}

func (p *Program) gatherHook(b *nn.Builder, prm *nn.Param, n *G.Node) (*G.Node, error) {
	e := p.e
	u := e.lay.unitOf[prm.Index]
	if p.pos[u] < 0 {
		p.pos[u] = len(p.order)
		p.order = append(p.order, u)
	}
	unit := e.lay.units[u]
	at := unit.GatherBase + prm.Offset - unit.Lo
	op := &gatherOp{id: ops.NextID(), name: prm.Name, unit: u, shape: prm.Shape, view: e.gatherR.f[at : at+prm.Numel() : at+prm.Numel()], prog: p}
	return G.ApplyOp(op, n)
}

// Units lists the units this program gathers, in forward order.
func (p *Program) Units() []*Unit {
	out := make([]*Unit, len(p.order))
	for i, u := range p.order {
		out[i] = p.e.lay.units[u]
	}
	return out
}

// Stats returns what the last Run measured.
func (p *Program) Stats() StepStats { return p.stats }

// SetInput copies data into the named input (see nn.Program.SetInput).
func (p *Program) SetInput(name string, data []float32) error { return p.np.SetInput(name, data) }

// Input returns the memory of the named input.
func (p *Program) Input(name string) ([]float32, error) { return p.np.Input(name) }

// Output returns the named output of the last Run (aliases the program's memory).
func (p *Program) Output(name string) ([]float32, error) { return p.np.Output(name) }

// LossValue is the loss of the last Run.
func (p *Program) LossValue() (float32, error) { return p.np.LossValue() }

// Close releases the tape machine.
func (p *Program) Close() error { return p.np.Close() }

// Run runs the program once. A training run adds the average over the ranks of this
// step's gradients into the engine's gradient shard (gradients accumulate until ZeroGrad).
// Every rank must call Run the same number of times with programs built alike.
func (p *Program) Run(ctx context.Context) error {
	e := p.e
	if e.closed {
		return ErrClosed
	}
	start := time.Now()
	st := &p.st
	st.ctx, st.err = ctx, nil
	clear(st.gw)
	clear(st.waited)
	clear(st.rw)
	clear(st.count)
	p.stats = StepStats{}
	e.peak = 0
	e.prefetchState()
	if len(p.order) > 0 {
		p.issueFrom(0)
	}
	runErr := p.np.Run(ctx)
	if runErr == nil && st.err != nil {
		runErr = st.err
	}
	if runErr == nil && p.training {
		// Units with parameters whose gradient never arrived (they do not reach the loss):
		// reduce what there is, in forward order, so every rank issues the same collectives.
		for _, u := range p.order {
			if st.rw[u] == nil && p.needed[u] > 0 {
				p.launchReduce(u)
			}
		}
	}
	wait := time.Now()
	var errs []error
	errs = append(errs, runErr)
	for u, w := range st.rw {
		if w == nil {
			continue
		}
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("zero: rank %d: reduce-scatter of unit %s: %w", e.rank, e.lay.units[u].Name, err))
			continue
		}
		un := e.lay.units[u]
		dst, src := e.grad[un.ShardBase:un.ShardBase+un.Shard], e.recvR.f[un.ShardBase:un.ShardBase+un.Shard]
		for i, v := range src {
			dst[i] += v
		}
	}
	p.stats.ReduceWait = time.Since(wait)
	for u, w := range st.gw {
		if w != nil && !st.waited[u] {
			if err := w.Wait(ctx); err != nil {
				errs = append(errs, fmt.Errorf("zero: rank %d: all-gather of unit %s: %w", e.rank, e.lay.units[u].Name, err))
			}
		}
	}
	p.sample()
	for _, r := range []*region{e.gatherR, e.sendR, e.recvR, e.gradR} {
		errs = append(errs, r.releaseAll())
	}
	p.stats.PeakBytes = e.peak
	p.stats.Run = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zero: rank %d: run: %w", e.rank, err)
	}
	return nil
}

// Step is Run followed by Engine.Step.
func (p *Program) Step(ctx context.Context) error {
	if err := p.Run(ctx); err != nil {
		return err
	}
	return p.e.Step()
}

// issueFrom issues the all-gathers of the units at forward positions k..k+prefetch.
func (p *Program) issueFrom(k int) {
	e := p.e
	for j := k; j < len(p.order) && j <= k+e.cfg.prefetch; j++ {
		u := p.order[j]
		if p.st.gw[u] != nil {
			continue
		}
		un := e.lay.units[u]
		p.st.gw[u] = e.g.AllGather(comm.F32(e.gatherR.f[un.GatherBase:un.GatherBase+un.Padded]), comm.F32(e.master[un.ShardBase:un.ShardBase+un.Shard]))
	}
}

// waitUnit makes unit u's parameters available (the gather op calls it on the tape).
func (p *Program) waitUnit(u int) error {
	st := &p.st
	if st.waited[u] {
		return nil
	}
	p.issueFrom(p.pos[u])
	t := time.Now()
	err := st.gw[u].Wait(st.ctx)
	p.stats.GatherWait += time.Since(t)
	st.waited[u] = true
	if err != nil {
		return fmt.Errorf("rank %d: all-gather of unit %s: %w", p.e.rank, p.e.lay.units[u].Name, err)
	}
	return nil
}

// onGrad is the gradient hook: once every used parameter of a unit has its gradient, the
// unit's reduce-scatter starts.
func (p *Program) onGrad(prm *nn.Param) error {
	if !p.training {
		return nil
	}
	u := p.e.lay.unitOf[prm.Index]
	p.st.count[u]++
	if p.st.count[u] == p.needed[u] {
		p.launchReduce(u)
	}
	return nil
}

// launchReduce divides unit u's gradients by the world size into the padded send region
// (as DDP's allreduce hook divides before summing), releases their pages in the full-size
// buffer, and issues the reduce-scatter to the owners.
func (p *Program) launchReduce(u int) {
	e := p.e
	un := e.lay.units[u]
	n := un.Hi - un.Lo
	src := e.gradR.f[un.Lo:un.Hi]
	dst := e.sendR.f[un.GatherBase : un.GatherBase+un.Padded]
	if e.world == 1 {
		copy(dst, src)
	} else {
		d := float32(e.world)
		for i, v := range src {
			dst[i] = v / d
		}
	}
	clear(dst[n:])
	p.sample()
	if err := e.gradR.release(un.Lo, un.Hi); err != nil && p.st.err == nil {
		p.st.err = err
	}
	p.st.rw[u] = e.g.ReduceScatter(comm.F32(e.recvR.f[un.ShardBase:un.ShardBase+un.Shard]), comm.F32(dst), comm.Sum)
}

// sample records the current model-state footprint for the step's peak.
func (p *Program) sample() {
	e := p.e
	b := e.persistentBytes()
	for _, r := range []*region{e.gatherR, e.sendR, e.recvR, e.gradR} {
		b += r.resident()
	}
	e.peak = max(e.peak, b)
}

// statsReducer is the SyncBatchNorm reducer: a blocking all-reduce over the group.
type statsReducer struct{ p *Program }

func (r statsReducer) ReduceStats(buf []float64) error {
	ctx := r.p.st.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if err := r.p.e.g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return fmt.Errorf("zero: rank %d: SyncBatchNorm all-reduce of %d statistics: %w", r.p.e.rank, len(buf), err)
	}
	return nil
}
