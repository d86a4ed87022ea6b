// Package devddp is DistributedDataParallel on CUDA devices: ddp's buckets reduced by NCCL
// over device memory, ordered by CUDA events, while the device's backward goes on, and the
// optimizer stepping each bucket on the device as soon as its reduction is on the stream
// (docs/DESIGN.md §9, "DDP on the device").
//
//	d, err := ddp.New(ctx, model, group)          // checks the models, broadcasts rank 0's
//	st, err := tape.NewState(dev, model, tape.WithOptimizer(opt))
//	nc, err := nccl.New(ctx, store, rank, size, nccl.WithDevice(ordinal))
//	dd, err := devddp.New(d, st, nc)
//	p, err := dd.Compile(build)
//	for each batch { p.SetInput(...); err = train.RunStep(ctx, p) }
//
// The split is PyTorch's c10d one: ddp decides the buckets and keeps the options, nccl
// moves device bytes (comm never imports ddp), tape runs the graph on the device and owns
// the device state; this package only wires the gradient hooks of tape's programs to NCCL.
//
// A step: each gradient the tape's GradHook has added into the state's device buffer is
// divided by the world size on the compute stream and marked ready; when a bucket (a range
// of the device buffer, ddp's layout and launch order) is complete, an event is recorded on
// the compute stream and the bucket is all-reduced in place on the NCCL group's stream after
// waiting for that event (nccl.Group.AllReduceDeviceAfter), so the host never waits for a
// bucket. After backward the compute stream waits for each bucket's "reduced" event and,
// in RunStep, the device optimizer updates that bucket's parameters (State.StepRange).
//
// Host-side collectives keep ddp's order: the buffer broadcast before forward (BatchNorm's
// running statistics are the host's, Note [Running statistics on the device]) and, every
// CheckEvery steps, the agreement check over the parameters copied to the host.
package devddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/replica"
)

// Reducer all-reduces device memory in stream order: nccl.Group's AllReduceDeviceAfter.
type Reducer interface {
	AllReduceDeviceAfter(p driver.DevPtr, n int, dt libnccl.DataType, op comm.Op, wait, done driver.Event) nccl.DeviceWork
}

// DDP is one rank's device replica: a ddp.DDP (its options, buckets, host group and
// timeline), the tape.State holding the parameters and gradients on the device, and the
// group that reduces device memory. It is driven from one goroutine.
type DDP struct {
	d       *ddp.DDP
	st      *tape.State
	red     Reducer
	cfg     ddp.DeviceConfig
	buckets []*ddp.Bucket
	byParam []int // by Param.Index
	ready   []driver.Event
	reduced []driver.Event
	steps   int
	checker replica.Checker
	bcast   replica.Broadcaster
	static  []bool // StaticGraph: unused in the first step
	seen    bool

	// step state
	sync     bool
	pending  []int
	isReady  []bool // by Param.Index
	next     int
	works    []nccl.DeviceWork
	hookErr  error
	start    time.Time
	firstGot time.Time
}

// New makes the device replica of d's rank over st (a State of d's model, made after
// ddp.New broadcast rank 0's parameters) with red reducing device memory (an nccl.Group on
// st's device). d's options apply, except those not on the device yet (an error names
// them: SyncBatchNorm, communication hooks); the buckets are d's initial ones (the rebuild
// from the arrival order is not done on the device).
func New(d *ddp.DDP, st *tape.State, red Reducer) (*DDP, error) {
	if d == nil || st == nil || red == nil {
		return nil, fmt.Errorf("devddp: nil DDP, state or reducer")
	}
	if st.Model() != d.Model {
		return nil, fmt.Errorf("devddp: %s: the device state is not of the DDP's model", d.Who())
	}
	cfg := d.DeviceConfig()
	if err := cfg.CheckDevice(); err != nil {
		return nil, fmt.Errorf("devddp: %s: %w", d.Who(), err)
	}
	x := &DDP{d: d, st: st, red: red, cfg: cfg, buckets: d.Buckets()}
	x.checker.Every = cfg.CheckEvery
	x.byParam = make([]int, len(d.Model.Params.Params))
	for _, b := range x.buckets {
		for _, p := range b.Params {
			x.byParam[p.Index] = b.Index
		}
	}
	c := st.Device().Context()
	for range x.buckets {
		for _, evs := range []*[]driver.Event{&x.ready, &x.reduced} {
			e, err := c.EventCreate(false)
			if err != nil {
				x.Close()
				return nil, fmt.Errorf("devddp: %s: bucket events: %w", d.Who(), err)
			}
			*evs = append(*evs, e)
		}
	}
	return x, nil
}

// DDP is the host DDP this replica follows.
func (x *DDP) DDP() *ddp.DDP { return x.d }

// State is the device state.
func (x *DDP) State() *tape.State { return x.st }

// Close destroys the bucket events. The state and the groups are the caller's.
func (x *DDP) Close() {
	c := x.st.Device().Context()
	for _, e := range append(x.ready, x.reduced...) {
		_ = c.EventDestroy(e)
	}
	x.ready, x.reduced = nil, nil
}

// Compile builds the model with build on the device state (State.Compile), with the
// gradient hook that marks device gradients ready. A program built with nn.Training(false)
// runs without communication.
func (x *DDP) Compile(build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	all := append(append([]nn.BuildOption(nil), opts...), nn.WithGradHook(x.onGrad))
	tp, err := x.st.Compile(build, all...)
	if err != nil {
		return nil, fmt.Errorf("devddp: %s: compile: %w", x.d.Who(), err)
	}
	p := &Program{Program: tp, x: x, training: tp.CPU().Builder.Training() && tp.CPU().Loss != nil}
	used := map[*nn.Param]bool{}
	for _, q := range tp.CPU().Builder.UsedParams() {
		used[q] = true
	}
	for _, q := range x.d.Model.Params.Params {
		if !used[q] {
			p.graphUnused = append(p.graphUnused, q)
		}
	}
	return p, nil
}

// Program is a model compiled for device DDP: train.Program's verbs. Run is forward,
// backward with each bucket all-reduced on the device as it fills, and the compute stream
// made to wait for the reductions; Step is the device optimizer, then the gradients are
// zeroed; RunStep updates each bucket's parameters as soon as its reduction is on the
// stream; ZeroGrad zeroes the device gradients. SetInput, Output and LossValue are the
// tape program's.
type Program struct {
	*tape.Program
	x           *DDP
	training    bool
	graphUnused []*nn.Param
}

// Run runs one step on this rank; on return the device gradient buffer holds (in stream
// order) the average of every rank's gradients, or under ddp's NoSync this rank's own.
func (p *Program) Run(ctx context.Context) error { return p.run(ctx, false) }

// Step applies the device optimizer, then zeroes the gradients.
func (p *Program) Step(ctx context.Context) error {
	start := time.Now()
	err := p.x.st.Step(ctx)
	p.x.d.Timeline().Add(ddp.Event{Name: ddp.EvOptimizer, Step: p.x.steps - 1, Bucket: -1, Start: start, End: time.Now()})
	if err != nil {
		return fmt.Errorf("devddp: %s: %w", p.x.d.Who(), err)
	}
	return nil
}

// RunStep is Run then Step, with each bucket's parameters updated on the device right after
// its reduction (the stream waits for that bucket only), while later buckets still reduce;
// under NoSync it is Run then Step.
func (p *Program) RunStep(ctx context.Context) error {
	if !p.training || !p.x.d.Synchronising() || !p.x.st.HasOptimizer() {
		if err := p.Run(ctx); err != nil {
			return err
		}
		return p.Step(ctx)
	}
	if err := p.run(ctx, true); err != nil {
		return err
	}
	if err := p.x.st.ZeroGrad(); err != nil {
		return fmt.Errorf("devddp: %s: %w", p.x.d.Who(), err)
	}
	return nil
}

func (p *Program) run(ctx context.Context, ranged bool) error {
	if !p.training {
		return p.Program.Run(ctx)
	}
	x := p.x
	x.sync = x.d.Synchronising()
	if x.cfg.BroadcastBuffers && len(x.d.Model.Params.Buffers) > 0 {
		start := time.Now()
		if err := x.bcast.Buffers(ctx, x.d.Group(), x.d.Model.Params.Buffers, 0, x.d.Who()); err != nil {
			return err
		}
		x.d.Timeline().Add(ddp.Event{Name: ddp.EvBuffers, Step: x.steps, Bucket: -1, Start: start, End: time.Now()})
	}
	if x.sync && x.checker.Due() {
		if err := x.checkAgreement(ctx); err != nil {
			return err
		}
	}
	x.begin()
	runErr := x.preMark(p.graphUnused)
	if runErr == nil {
		runErr = p.Program.Run(ctx)
	}
	return x.finish(ctx, runErr, ranged)
}

// checkAgreement hashes the parameters (copied from the device) and buffers on every rank.
func (x *DDP) checkAgreement(ctx context.Context) error {
	if err := x.st.ParamsToHost(ctx); err != nil {
		return fmt.Errorf("devddp: %s: agreement check: %w", x.d.Who(), err)
	}
	ts := replica.Replicated(x.d.Model.Params, true, x.cfg.BroadcastBuffers)
	return x.checker.Check(ctx, x.d.Group(), ts, x.steps, x.d.Who())
}

func (x *DDP) begin() {
	n := len(x.d.Model.Params.Params)
	if len(x.isReady) != n {
		x.isReady = make([]bool, n)
	}
	clear(x.isReady)
	x.pending = x.pending[:0]
	for _, b := range x.buckets {
		x.pending = append(x.pending, len(b.Params))
	}
	x.works = make([]nccl.DeviceWork, len(x.buckets))
	x.next, x.hookErr = 0, nil
	x.start, x.firstGot = time.Now(), time.Time{}
}

// onGrad is the gradient hook: p's gradient has just been added into the device buffer (in
// stream order).
func (x *DDP) onGrad(p *nn.Param) error {
	now := time.Now()
	if x.firstGot.IsZero() {
		x.firstGot = now
	}
	x.d.Timeline().Add(ddp.Event{Name: ddp.EvGradient, Step: x.steps, Bucket: -1, Param: p.Name, Start: now, End: now})
	if !x.sync {
		return nil
	}
	return x.markReady(p)
}

// markReady divides p's gradient by the world size on the device and launches, in bucket
// order, every bucket that has become complete.
func (x *DDP) markReady(p *nn.Param) error {
	if x.isReady[p.Index] {
		err := fmt.Errorf("devddp: %s: gradient of %s arrived after it was marked ready (is the graph really static?)", x.d.Who(), p.Name)
		if x.hookErr == nil {
			x.hookErr = err
		}
		return err
	}
	x.isReady[p.Index] = true
	if n := x.d.Size(); n > 1 {
		// As ddp's: a power of two's reciprocal is exact, so this is the division.
		if err := x.st.ScaleGrad(p, 1/float32(n)); err != nil {
			return fmt.Errorf("devddp: %s: %w", x.d.Who(), err)
		}
	}
	x.pending[x.byParam[p.Index]]--
	for x.next < len(x.buckets) && x.pending[x.next] == 0 {
		x.launch(x.next)
		x.next++
	}
	return nil
}

// launch records bucket i's ready event on the compute stream and all-reduces the bucket on
// the group's stream after it. A failure is the bucket's Work's, reported by finish.
func (x *DDP) launch(i int) {
	b := x.buckets[i]
	dev := x.st.Device()
	if err := dev.Context().EventRecord(x.ready[i], dev.Stream()); err != nil {
		x.works[i] = nccl.FailedDeviceWork(fmt.Errorf("recording the ready event: %w", err))
		return
	}
	g, err := x.st.GradRange(b.Lo, b.Hi)
	if err != nil {
		x.works[i] = nccl.FailedDeviceWork(err)
		return
	}
	start := time.Now()
	w := x.red.AllReduceDeviceAfter(g.Ptr(), g.Len(), libnccl.Float32, comm.Sum, x.ready[i], x.reduced[i])
	x.works[i] = w
	step := x.steps
	tl := x.d.Timeline()
	go func() {
		<-w.Done()
		tl.Add(ddp.Event{Name: ddp.EvAllReduce, Step: step, Bucket: i, Start: start, End: time.Now()})
	}()
}

// preMark marks the parameters known to get no gradient before the tape runs.
func (x *DDP) preMark(graphUnused []*nn.Param) error {
	if !x.sync {
		return nil
	}
	if x.cfg.FindUnused || x.cfg.StaticGraph {
		for _, p := range graphUnused {
			if err := x.markReady(p); err != nil {
				return err
			}
		}
	}
	if x.cfg.StaticGraph && x.seen {
		for i, un := range x.static {
			if un && !x.isReady[i] {
				if err := x.markReady(x.d.Model.Params.Params[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// finish marks what got no gradient ready (so every bucket is launched whatever happened),
// makes the compute stream wait for each bucket's reduction, updating the bucket's
// parameters right after it when ranged, then waits for the reductions to end and reports
// their errors.
func (x *DDP) finish(ctx context.Context, runErr error, ranged bool) error {
	end := time.Now()
	tl := x.d.Timeline()
	if !x.firstGot.IsZero() {
		tl.Add(ddp.Event{Name: ddp.EvForward, Step: x.steps, Bucket: -1, Start: x.start, End: x.firstGot})
		tl.Add(ddp.Event{Name: ddp.EvBackward, Step: x.steps, Bucket: -1, Start: x.firstGot, End: end})
	}
	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	} else if x.hookErr != nil {
		errs = append(errs, x.hookErr)
	}
	if !x.sync {
		if len(errs) > 0 {
			return fmt.Errorf("devddp: %s: step %d (no sync): %w", x.d.Who(), x.steps, errors.Join(errs...))
		}
		return nil
	}
	var unused []string
	for _, b := range x.buckets {
		for _, p := range b.Params {
			if x.isReady[p.Index] {
				continue
			}
			unused = append(unused, p.Name)
			if x.cfg.StaticGraph && !x.seen {
				if x.static == nil {
					x.static = make([]bool, len(x.d.Model.Params.Params))
				}
				x.static[p.Index] = true
			}
			// Its gradient range holds zeros (or what NoSync runs accumulated): a zero
			// contribution, reduced so that every rank issues the same collectives.
			if err := x.markReady(p); err != nil && len(errs) == 0 {
				errs = append(errs, err)
			}
		}
	}
	if x.cfg.StaticGraph {
		x.seen = true
	}
	if len(unused) > 0 && len(errs) == 0 && !x.cfg.FindUnused && !x.cfg.StaticGraph {
		errs = append(errs, fmt.Errorf("%w: %v (pass ddp.FindUnusedParameters() if that is intended)", ddp.ErrUnusedParameters, unused))
	}
	dev := x.st.Device()
	began := false
	for i, w := range x.works {
		if w == nil {
			errs = append(errs, fmt.Errorf("%s was never launched", x.buckets[i]))
			break
		}
		select {
		case <-w.Enqueued():
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for %s to be enqueued: %w", x.buckets[i], ctx.Err()))
		}
		if len(errs) > 0 {
			break
		}
		if err := dev.Context().StreamWaitEvent(dev.Stream(), x.reduced[i]); err != nil {
			errs = append(errs, fmt.Errorf("waiting for %s's reduction: %w", x.buckets[i], err))
			break
		}
		if !ranged {
			continue
		}
		now := time.Now()
		if !began {
			if err := x.st.BeginStep(); err != nil {
				errs = append(errs, err)
				break
			}
			began = true
		}
		b := x.buckets[i]
		if err := x.st.StepRange(b.Lo, b.Hi); err != nil {
			errs = append(errs, fmt.Errorf("optimizer step on %s: %w", b, err))
			break
		}
		tl.Add(ddp.Event{Name: ddp.EvOptimizer, Step: x.steps, Bucket: i, Start: now, End: time.Now()})
	}
	// Wait for every launched reduction, so the next collective never finds one running and
	// a failure is reported in the step it happened in.
	waitStart := time.Now()
	for i, w := range x.works {
		if w == nil {
			continue
		}
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, fmt.Errorf("all-reduce %s: %w", x.buckets[i], err))
			break
		}
	}
	tl.Add(ddp.Event{Name: ddp.EvWait, Step: x.steps, Bucket: -1, Start: waitStart, End: time.Now()})
	if began {
		if err := x.st.EndStep(); err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	} else if ranged && len(errs) == 0 {
		// No bucket (a model without parameters): a plain step.
		if err := x.st.Step(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("devddp: %s: step %d: %w", x.d.Who(), x.steps, errors.Join(errs...))
	}
	x.steps++
	return nil
}
