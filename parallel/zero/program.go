package zero

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gorgonia-parallel/gp/internal/region"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Program is a model compiled for ZeRO-3: its graph gathers each unit's parameters before
// use, releases them after the unit's forward and gathers them again before its backward
// (where the graph's dependencies allow, see schedule), and its gradient sink writes each
// unit's gradients into the reduce-scatter to their owners. With a backend (WithBackend) it
// runs the backend's program (Executor) with the same verbs.
type Program struct {
	e        *Engine
	x        Executor // the backend's; nil on the host
	np       *nn.Program
	training bool
	order    []int       // units in order of first use (forward order)
	pos      []int       // by unit: index in order, -1 when unused
	gathers  [][]*G.Node // by unit: its gather nodes
	links    []*link     // by unit: its forward release point, nil when none
	sched    *schedule
	red      *ReduceSchedule[comm.Work]
	zerosR   *region.Region // the barriers' zero gradients
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
	// RegatherWait is the same for the re-gathers of backward.
	RegatherWait time.Duration
	// ReduceWait is the time spent after the tape waiting for reduce-scatters.
	ReduceWait time.Duration
	// PeakBytes is the largest model-state footprint during the run, counted from the
	// engine's buffers: persistent state plus the gathered units (from the issue of their
	// all-gather to their release), the reduce-scatter inputs (each gradient from when it
	// is written until its unit's result is folded) and outputs (from launch until folded).
	PeakBytes int64
	// Released and Regathered count the unit releases and backward re-gathers of the run.
	Released, Regathered int
}

type stepState struct {
	ctx      context.Context
	gw       []comm.Work // by unit: all-gather in flight
	resident []bool      // by unit: gathered memory valid
	released []bool      // by unit: released once in this run
	sent     []int64     // by unit: bytes of its reduce-scatter input written in this run
	live     int64       // bytes of gathered units and reduce-scatter buffers in use
}

// Compile builds the model with build for ZeRO-3. opts are nn build options (autocast,
// Training(false) for an evaluation program, more hooks); do not pass nn.WithGradBuffer,
// nn.WithParamBacking or nn.WithGradSink (ZeRO sets them). Programs of in-process ranks
// may be compiled concurrently (nn.Compile serialises).
func (e *Engine) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if e.be != nil {
		x, err := e.be.Compile(build, opts...)
		if err != nil {
			return nil, fmt.Errorf("zero: rank %d: compile: %w", e.rank, err)
		}
		return &Program{e: e, x: x, training: x.Training()}, nil
	}
	nu := len(e.lay.units)
	p := &Program{e: e, pos: slices.Repeat([]int{-1}, nu), gathers: make([][]*G.Node, nu), links: make([]*link, nu)}
	all := []nn.BuildOption{nn.WithParamHook(p.gatherHook), nn.WithParamBacking(e.leafBacking), nn.WithGradSink(p.sink)}
	all = append(all, opts...)
	all = append(all, nn.WithGradHook(p.onGrad))
	if e.cfg.SyncBN {
		all = append(all, nn.WithStatsReducer(replica.StatsReducer{Group: e.g, Ctx: func() context.Context { return p.st.ctx }, Who: e.who()}))
	}
	var fwdMax int64
	wrapped := func(b *nn.Builder) (*G.Node, error) {
		loss, err := build(b)
		for _, n := range b.Graph.AllNodes() {
			fwdMax = max(fwdMax, n.ID())
		}
		return loss, err
	}
	np, err := nn.Compile(e.Model, wrapped, all...)
	if err != nil {
		return nil, fmt.Errorf("zero: rank %d: compile: %w", e.rank, err)
	}
	if np.HasUpdate() {
		np.Close()
		return nil, fmt.Errorf("zero: rank %d: compile: an optimizer or gorgonia solver was given to Compile (nn.WithOptimizer, nn.WithSolver), but ZeRO-3 keeps each rank's shard of the parameters and gradients and steps it with the engine's optimizer (zero.WithOptimizer); a gorgonia solver steps whole tensors, which no rank holds between steps", e.rank)
	}
	p.np = np
	p.training = np.Builder.Training() && np.Loss != nil
	var used []*nn.Param // the parameters whose gradients a Run reduces
	if p.training {
		used = np.Builder.UsedParams()
	}
	p.sched = p.plan(fwdMax)
	if err := p.allocZeros(); err != nil {
		np.Close()
		return nil, err
	}
	p.st = stepState{gw: make([]comm.Work, nu), resident: make([]bool, nu), released: make([]bool, nu),
		sent: make([]int64, nu)}
	p.red = NewReduceSchedule[comm.Work](e.lay, used, hostReducer{p}, false)
	return p, nil
}

func (p *Program) gatherHook(b *nn.Builder, prm *nn.Param, n *G.Node) (*G.Node, error) {
	e := p.e
	u := e.lay.unitOf[prm.Index]
	prev := -1
	var x *G.Node
	if p.pos[u] < 0 {
		if k := len(p.order); k > 0 && len(prm.Shape) > 0 {
			if x = frontier(b.Graph); x != nil {
				prev = p.order[k-1]
			}
		}
		p.pos[u] = len(p.order)
		p.order = append(p.order, u)
	}
	unit := e.lay.units[u]
	at := unit.GatherBase + prm.Offset - unit.Lo
	op := &gatherOp{id: ops.NextID(), name: prm.Name, unit: u, shape: prm.Shape, view: e.gatherR.Floats()[at : at+prm.Numel() : at+prm.Numel()], prog: p, prev: prev}
	var out *G.Node
	var err error
	if prev >= 0 {
		op.xShape = x.Shape().Clone()
		out, err = G.ApplyOp(op, n, x)
		if err == nil && p.links[prev] == nil {
			p.links[prev] = &link{node: out, op: op}
		}
	} else {
		out, err = G.ApplyOp(op, n)
	}
	if err != nil {
		return nil, err
	}
	p.gathers[u] = append(p.gathers[u], out)
	return out, nil
}

// Units lists the units this program gathers, in forward order.
func (p *Program) Units() []*Unit {
	order := p.order
	if p.x != nil {
		order = p.x.Units()
	}
	out := make([]*Unit, len(order))
	for i, u := range order {
		out[i] = p.e.lay.units[u]
	}
	return out
}

// Stats returns what the last Run measured on the host (zero with a backend).
func (p *Program) Stats() StepStats { return p.stats }

// exec is what runs the program's graph: the backend's program, or the host's nn program.
func (p *Program) exec() interface {
	SetInput(name string, data []float32) error
	Input(name string) ([]float32, error)
	Output(name string) ([]float32, error)
	LossValue() (float32, error)
} {
	if p.x != nil {
		return p.x
	}
	return p.np
}

// SetInput copies data into the named input (see nn.Program.SetInput).
func (p *Program) SetInput(name string, data []float32) error {
	return p.exec().SetInput(name, data)
}

// Input returns the memory of the named input.
func (p *Program) Input(name string) ([]float32, error) { return p.exec().Input(name) }

// Output returns the named output of the last Run (aliases the program's memory).
func (p *Program) Output(name string) ([]float32, error) { return p.exec().Output(name) }

// LossValue is the loss of the last Run.
func (p *Program) LossValue() (float32, error) { return p.exec().LossValue() }

// GlobalLoss is the mean over the ranks of their losses in the last Run: the global batch's
// loss. It is a collective (one all-reduce of one value): every rank calls it.
func (p *Program) GlobalLoss(ctx context.Context) (float32, error) {
	v, err := p.LossValue()
	if err != nil {
		return 0, err
	}
	return replica.Mean(ctx, p.e.g, v, fmt.Sprintf("zero: rank %d", p.e.rank))
}

// Close releases the tape machine (or the backend's program).
func (p *Program) Close() error {
	if p.x != nil {
		return p.x.Close()
	}
	return errors.Join(p.np.Close(), regionErr(p.zerosR.Close()))
}

// allocZeros maps the zero gradients the barriers return, one slot each.
func (p *Program) allocZeros() error {
	var bs []*barrierOp
	n := 0
	for _, l := range p.links {
		if l != nil && l.op.barrier != nil {
			b := l.op.barrier.Op().(*barrierOp)
			bs = append(bs, b)
			n += tensor.Shape(b.shape).TotalSize()
		}
	}
	if len(bs) == 0 {
		return nil
	}
	var err error
	if p.zerosR, err = region.NewAnon(fmt.Sprintf("rank %d re-gather barrier zeros", p.e.rank), n); err != nil {
		return regionErr(err)
	}
	off := 0
	for _, b := range bs {
		k := tensor.Shape(b.shape).TotalSize()
		b.zeros = p.zerosR.Floats()[off : off+k : off+k]
		off += k
	}
	return nil
}

// Run runs the program once. A training run adds the average over the ranks of this
// step's gradients into the engine's gradient shard (gradients accumulate until ZeroGrad).
// Every rank must call Run the same number of times with programs built alike.
func (p *Program) Run(ctx context.Context) error {
	e := p.e
	if e.closed {
		return ErrClosed
	}
	if p.training {
		if err := e.checkAgreement(ctx); err != nil {
			return err
		}
	}
	if p.x != nil {
		return p.x.Run(ctx)
	}
	start := time.Now()
	st := &p.st
	st.ctx = ctx
	clear(st.gw)
	clear(st.resident)
	clear(st.released)
	clear(st.sent)
	st.live = 0
	p.red.Begin(ctx)
	p.stats = StepStats{}
	e.peak = 0
	e.prefetchState()
	if len(p.order) > 0 {
		p.issueFrom(0)
	}
	runErr := p.np.Run(ctx)
	wait := time.Now()
	errs := []error{p.red.Finish(runErr)}
	p.stats.ReduceWait = time.Since(wait)
	for u, w := range st.gw {
		if w != nil {
			if err := w.Wait(ctx); err != nil {
				errs = append(errs, fmt.Errorf("zero: rank %d: all-gather of unit %s: %w", e.rank, e.lay.units[u].Name, err))
			}
			st.gw[u] = nil
		}
	}
	// The step's regions are freed lazily: the next step writes the same pages again, and
	// refaulting them cost more than the rest of the step's overhead together (internal/region's Note on Region).
	// The barriers' zeros must read as zeros again: released.
	for _, r := range []*region.Region{e.gatherR, e.sendR, e.recvR} {
		errs = append(errs, regionErr(r.FreeAll()))
	}
	errs = append(errs, regionErr(p.zerosR.ReleaseAll()))
	p.stats.PeakBytes = e.peak
	p.stats.Run = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zero: rank %d: run: %w", e.rank, err)
	}
	return nil
}

// Step applies the engine's optimizer to this rank's shard (Engine.Step) and zeroes the
// gradients (Engine.ZeroGrad): the verb of package train.
func (p *Program) Step(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.e.Step(ctx); err != nil {
		return err
	}
	return p.e.ZeroGrad()
}

// RunStep is Run then Step (train.Overlapped). With a backend that can, the update of each
// unit's shard overlaps the later units' reductions (cuda/devzero); the result is the same.
func (p *Program) RunStep(ctx context.Context) error {
	if p.e.closed {
		return ErrClosed
	}
	if p.x != nil {
		if p.training {
			if err := p.e.checkAgreement(ctx); err != nil {
				return err
			}
		}
		return p.x.RunStep(ctx)
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	return p.Step(ctx)
}

// ZeroGrad zeroes the gradients (Engine.ZeroGrad).
func (p *Program) ZeroGrad() error { return p.e.ZeroGrad() }

// issue starts the all-gather of unit u unless it is resident or in flight.
func (p *Program) issue(u int) {
	st, e := &p.st, p.e
	if st.resident[u] || st.gw[u] != nil {
		return
	}
	un := e.lay.units[u]
	st.live += 4 * int64(un.Padded)
	p.sample()
	st.gw[u] = e.g.AllGather(comm.F32(e.gatherR.Floats()[un.GatherBase:un.GatherBase+un.Padded]), comm.F32(e.master[un.ShardBase:un.ShardBase+un.Shard]))
}

// await makes unit u resident, adding the time blocked to *waited.
func (p *Program) await(u int, waited *time.Duration) error {
	st := &p.st
	if st.resident[u] {
		return nil
	}
	p.issue(u)
	t := time.Now()
	err := st.gw[u].Wait(st.ctx)
	*waited += time.Since(t)
	st.gw[u] = nil
	if err != nil {
		return fmt.Errorf("rank %d: all-gather of unit %s: %w", p.e.rank, p.e.lay.units[u].Name, err)
	}
	st.resident[u] = true
	return nil
}

// issueFrom issues the all-gathers of the units at forward positions k..k+prefetch that
// have not been gathered in this run.
func (p *Program) issueFrom(k int) {
	for j := k; j < len(p.order) && j <= k+p.e.cfg.Prefetch; j++ {
		if u := p.order[j]; !p.st.released[u] {
			p.issue(u)
		}
	}
}

// waitUnit makes unit u's parameters available in forward (the gather op calls it).
func (p *Program) waitUnit(u int) error {
	if p.st.resident[u] {
		return nil
	}
	p.issueFrom(p.pos[u])
	return p.await(u, &p.stats.GatherWait)
}

// forwardDone releases unit u's gathered parameters when the schedule proved its forward
// readers done (the next unit's first gather op calls it).
func (p *Program) forwardDone(u int) error {
	if !p.sched.fwdRelease[u] {
		return nil
	}
	return p.release(u)
}

// release returns unit u's gathered pages to the kernel (lazily, see region.Region.Free).
func (p *Program) release(u int) error {
	st, e := &p.st, p.e
	if !st.resident[u] {
		return nil
	}
	un := e.lay.units[u]
	if err := e.gatherR.Free(un.GatherBase, un.GatherBase+un.Padded); err != nil {
		return regionErr(err)
	}
	st.live -= 4 * int64(un.Padded)
	st.resident[u], st.released[u] = false, true
	p.stats.Released++
	return nil
}

// regather brings unit u back before its backward (its barrier op calls it; the prefetch
// issued it when the next unit's first gradient arrived), then releases what the
// schedule says is done at this point.
func (p *Program) regather(u int) error {
	if p.sched.regather[u] && !p.st.resident[u] {
		if err := p.await(u, &p.stats.RegatherWait); err != nil {
			return fmt.Errorf("zero: re-gather: %w", err)
		}
		p.stats.Regathered++
	}
	for _, v := range p.sched.atBarrier[u] {
		if err := p.release(v); err != nil {
			return err
		}
	}
	return nil
}

// prefetchBackward issues the re-gathers of the units at forward positions k-1..k-prefetch.
func (p *Program) prefetchBackward(k int) {
	for j := k - 1; j >= 0 && j >= k-p.e.cfg.Prefetch; j-- {
		if u := p.order[j]; p.sched.regather[u] && p.st.released[u] {
			p.issue(u)
		}
	}
}

// sink receives parameter prm's gradient during backward and writes it, divided by the
// world size (as DDP's allreduce hook divides before summing), into the unit's padded
// reduce-scatter input. Where the schedule proved that nothing else reads the tape's
// register that holds the gradient, its pages go too: otherwise the ops would keep a
// full-size gradient between steps.
func (p *Program) sink(prm *nn.Param, grad []float32) error {
	if !p.training {
		return nil
	}
	e, st := p.e, &p.st
	u := e.lay.unitOf[prm.Index]
	un := e.lay.units[u]
	st.sent[u] += 4 * int64(len(grad))
	st.live += 4 * int64(len(grad))
	p.sample()
	at := un.GatherBase + prm.Offset - un.Lo
	divideInto(e.sendR.Floats()[at:at+len(grad)], grad, e.world)
	if p.sched.dropGrad[prm.Index] {
		region.DropPages(grad)
	}
	return nil
}

// onGrad is the gradient hook, after the sink: the gradient schedule counts it (launching
// and retiring reductions); then what the release schedule says is done here is released,
// and the first gradient of a unit starts the re-gather of the unit before it (prefetch),
// so that it overlaps this unit's backward.
func (p *Program) onGrad(prm *nn.Param) error {
	if !p.training {
		return nil
	}
	first, err := p.red.Arrive(prm)
	if err != nil {
		return err
	}
	for _, v := range p.sched.atSink[prm.Index] {
		if err := p.release(v); err != nil {
			return err
		}
	}
	if first {
		p.prefetchBackward(p.pos[p.e.lay.unitOf[prm.Index]])
	}
	return nil
}

// hostReducer is the host's UnitReducer: the program's reduce-scatter buffers (the engine's
// send and receive regions) over the engine's group.
type hostReducer struct{ p *Program }

// Launch issues the reduce-scatter of unit u's padded gradients to their owners.
func (h hostReducer) Launch(u int) comm.Work {
	p := h.p
	e, st := p.e, &p.st
	un := e.lay.units[u]
	dst := e.sendR.Floats()[un.GatherBase : un.GatherBase+un.Padded]
	// The input's pages were freed lazily by the last step: what no gradient was written
	// into this run (padding, parameters that do not reach the loss) is cleared.
	clear(dst[un.Hi-un.Lo:])
	n := int64(un.Padded - (un.Hi - un.Lo))
	for _, prm := range un.Params {
		if !p.red.arrived(prm) {
			clear(dst[prm.Offset-un.Lo : prm.Offset-un.Lo+prm.Numel()])
			n += int64(prm.Numel())
		}
	}
	st.sent[u] += 4 * n
	st.live += 4*n + 4*int64(un.Shard)
	p.sample()
	return e.g.ReduceScatter(comm.F32(e.recvR.Floats()[un.ShardBase:un.ShardBase+un.Shard]), comm.F32(dst), comm.Sum)
}

// Retire adds unit u's reduce-scatter result into the gradient shard and releases the
// unit's send and receive buffers.
func (h hostReducer) Retire(u int, _ comm.Work) error {
	e, un := h.p.e, h.p.e.lay.units[u]
	simd.AddTo(e.grad[un.ShardBase:un.ShardBase+un.Shard], e.recvR.Floats()[un.ShardBase:un.ShardBase+un.Shard])
	h.p.st.live -= h.p.st.sent[u] + 4*int64(un.Shard)
	return errors.Join(regionErr(e.sendR.Free(un.GatherBase, un.GatherBase+un.Padded)), regionErr(e.recvR.Free(un.ShardBase, un.ShardBase+un.Shard)))
}

// sample records the current model-state footprint for the step's peak.
func (p *Program) sample() {
	e := p.e
	e.peak = max(e.peak, e.persistentBytes()+p.st.live)
}

// divideInto sets dst[i] = src[i]/n, the world average as ddp.DivideByWorld takes it (a
// power of two's exact reciprocal multiplies, in the same pass as the copy where it can).
func divideInto(dst, src []float32, n int) {
	dst = dst[:len(src)]
	if n > 1 && n&(n-1) == 0 && simd.ScaleTo(src, dst, 1/float32(n)) {
		return
	}
	copy(dst, src)
	ddp.DivideByWorld(dst, n)
}
