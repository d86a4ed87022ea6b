package ddp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gorgonia-parallel/gp/internal/bucketcut"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// stepState is what the gradient hooks of one step share with the step's end. It is only
// touched from the goroutine that runs the step (the tape runs the hooks on it).
type stepState struct {
	ctx     context.Context
	sync    bool        // this step reduces gradients (false under NoSync)
	pending []int       // per bucket: parameters not yet ready
	ready   []bool      // by Param.Index
	next    int         // next bucket to launch
	works   []comm.Work // per launched bucket
	arrived []int       // flat positions in the order gradients arrived
	start   time.Time   // the step began
	first   time.Time   // the first gradient arrived
	err     error       // first misuse seen by a hook
}

// Note [Division in place]
//
// The default hook divides every gradient by the world size as it arrives, then sums the
// buckets (PyTorch's order). That division is a pass over the whole gradient buffer, which on
// two ranks sharing two cores was 1-1.5% of a resnet18 step (CPU profile of bench/ddp): more
// than half of what the in-place all-reduce itself costs. When a bucket's all-reduce takes the
// zero-copy path (comm.InPlace: SharedGradients on one host), comm.Avg divides each block of
// the result while it is in L1 instead, so the division costs no memory traffic. The result
// is (g0+g1+...)/n instead of g0/n+g1/n+...: the same bits for a world of a power of two
// (the reciprocal is exact) but for sums that underflow; other worlds keep the division in
// markReady. Every rank gets the same bits, since one rank reduces each element.

// beginStep resets the step state before a forward.
func (d *DDP) beginStep(ctx context.Context, sync bool) {
	st := &d.st
	n := len(d.Model.Params.Params)
	if len(st.ready) != n {
		st.ready = make([]bool, n)
	}
	clear(st.ready)
	st.pending = st.pending[:0]
	for _, b := range d.buckets {
		st.pending = append(st.pending, len(b.Params))
	}
	st.works = make([]comm.Work, len(d.buckets))
	st.ctx, st.sync, st.next, st.err = ctx, sync, 0, nil
	st.arrived = st.arrived[:0]
	st.start, st.first = time.Now(), time.Time{}
}

// onGrad is the gradient hook: p's gradient has just been accumulated into the buffer.
func (d *DDP) onGrad(p *nn.Param) error {
	st := &d.st
	now := time.Now()
	if st.first.IsZero() {
		st.first = now
	}
	st.arrived = append(st.arrived, d.flatPos[p.Index])
	d.tl.Add(timeline.Event{Name: timeline.EvGradient, Step: d.steps, Bucket: -1, Param: p.Name, Start: now, End: now})
	if !st.sync {
		return nil
	}
	if err := d.markReady(p); err != nil {
		return err
	}
	d.yieldToComm()
	return nil
}

// yieldToComm lets the communication goroutines run (runtime.Gosched) when a launched
// all-reduce has not completed. The compute calls it between gradients and between pieces
// of the optimizer's update (Note [Yielding to communication]).
func (d *DDP) yieldToComm() {
	st := &d.st
	for i := range st.next {
		select {
		case <-st.works[i].Done():
		default:
			runtime.Gosched()
			return
		}
	}
}

// Note [Yielding to communication]
//
// With one P per rank (GOMAXPROCS=1, one core per rank), the goroutine that moves a bucket's
// gradients runs only when the compute goroutine blocks, yields or is preempted, which the
// runtime does after 10 ms. On the shared-memory path both ranks' goroutines take part in
// each all-reduce (each reduces a slice), so a rank whose compute holds the P stalls the
// other rank's reduction too. Traces of bench/ddp (resnet18, 2 ranks) showed it at the end
// of backward: the last bucket (1.45 MiB, well under a millisecond of work) completed
// 0.4-9.6 ms after the later rank's backward, because the earlier rank was updating the
// first buckets' parameters. The compute therefore yields after each gradient hook and
// between pieces of stepPiece elements of the update while a reduction is outstanding; a
// yield with nothing else to run costs well under a microsecond.

// markReady marks p's gradient final for this step and launches, in bucket order, every
// bucket that has become complete.
func (d *DDP) markReady(p *nn.Param) error {
	st := &d.st
	fail := func(err error) error {
		if st.err == nil {
			st.err = err
		}
		return err
	}
	if st.ready[p.Index] {
		return fail(fmt.Errorf("%s: gradient of %s arrived after it was marked ready (%s may be reducing it already; is the graph really static?)",
			d.who(), p.Name, d.buckets[d.byParam[p.Index]]))
	}
	st.ready[p.Index] = true
	if d.prescale {
		if err := d.be.Divide(p); err != nil {
			return fail(fmt.Errorf("%s: dividing the gradient of %s by the world size: %w", d.who(), p.Name, err))
		}
	}
	st.pending[d.byParam[p.Index]]--
	for st.next < len(d.buckets) && st.pending[st.next] == 0 {
		d.launch(st.next)
		st.next++
	}
	return nil
}

// launch starts bucket i's reduction on the backend; a failure is its Work's, reported by
// finish.
func (d *DDP) launch(i int) {
	b := d.buckets[i]
	start := time.Now()
	w := d.be.Launch(d.st.ctx, b, d.cfg.hook)
	if w == nil {
		w = comm.Failed(errors.New("communication hook returned no Work"))
	}
	d.st.works[i] = w
	step := d.steps
	go func() {
		<-w.Done()
		d.tl.Add(timeline.Event{Name: timeline.EvAllReduce, Step: step, Bucket: i, Start: start, End: time.Now()})
	}()
}

// finish ends a step after the tape: it marks the parameters that got no gradient ready
// (an error unless FindUnusedParameters or StaticGraph), so that every bucket is launched
// whatever happened, lands every bucket in order (Backend.Land), and rebuilds the buckets
// after the first synchronised step. runErr is the tape's error. done, when not nil, is
// called with each bucket as soon as its reduction has landed, in bucket order, while later
// buckets may still be reducing; never after an error.
func (d *DDP) finish(ctx context.Context, runErr error, done func(*Bucket) error) error {
	st := &d.st
	end := time.Now()
	if !st.first.IsZero() {
		d.tl.Add(timeline.Event{Name: timeline.EvForward, Step: d.steps, Bucket: -1, Start: st.start, End: st.first})
		d.tl.Add(timeline.Event{Name: timeline.EvBackward, Step: d.steps, Bucket: -1, Start: st.first, End: end})
	}
	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	} else if st.err != nil {
		errs = append(errs, st.err)
	}
	if !st.sync {
		if len(errs) > 0 {
			return fmt.Errorf("%s: step %d (no sync): %w", d.who(), d.steps, errors.Join(errs...))
		}
		return nil
	}
	var unused []string
	for _, p := range d.flat {
		if st.ready[p.Index] {
			continue
		}
		unused = append(unused, p.Name)
		if d.cfg.staticGraph && !d.staticSeen {
			if d.static == nil {
				d.static = make([]bool, len(d.Model.Params.Params))
			}
			d.static[p.Index] = true
		}
		// Its gradient holds zeros (or what NoSync runs accumulated): a zero contribution,
		// reduced so that every rank issues the same collectives.
		if err := d.markReady(p); err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	if d.cfg.staticGraph {
		d.staticSeen = true
	}
	if len(unused) > 0 && len(errs) == 0 && !d.cfg.findUnused && !d.cfg.staticGraph {
		if len(unused) == len(d.flat) {
			// Nothing reached a tap: the backward did not run through the parameters at
			// all, and FindUnusedParameters would only train every rank on zeros.
			errs = append(errs, fmt.Errorf("%w: none of the %d parameters got a gradient: the loss does not depend on them (a loss built from the inputs alone, or a forward that reads the learnables instead of the nodes Builder.Param or Builder.Learnable returned)",
				ErrUnusedParameters, len(unused)))
		} else {
			errs = append(errs, fmt.Errorf("%w: %v (they do not reach the loss, or the graph does not use them; if that is intended, pass ddp.FindUnusedParameters(), which reduces zeros for them)",
				ErrUnusedParameters, unused))
		}
	}
	waitStart, landed := end, true
	for i, w := range st.works {
		b := d.buckets[i]
		if w == nil {
			errs = append(errs, fmt.Errorf("%s was never launched", b))
			break
		}
		if err := d.be.Land(ctx, b, w); err != nil {
			errs = append(errs, fmt.Errorf("all-reduce %s: %w", b, err))
			landed = false
			break // the group is poisoned: the other buckets fail alike
		}
		if done == nil || len(errs) > 0 {
			continue
		}
		now := time.Now()
		d.tl.Add(timeline.Event{Name: timeline.EvWait, Step: d.steps, Bucket: -1, Start: waitStart, End: now})
		if err := done(b); err != nil {
			errs = append(errs, err)
			// Keep going: every bucket was launched, and the next collective must not
			// find this one still running.
		}
		waitStart = time.Now()
		d.tl.Add(timeline.Event{Name: timeline.EvOptimizer, Step: d.steps, Bucket: i, Start: now, End: waitStart})
	}
	// Wait for every launched reduction (a backend's Land may return before it ends), so
	// the next collective never finds one running and a failure is reported in the step it
	// happened in.
	for i, w := range st.works {
		if w == nil {
			continue
		}
		if err := w.Wait(ctx); err != nil {
			if landed {
				errs = append(errs, fmt.Errorf("all-reduce %s: %w", d.buckets[i], err))
			}
			break
		}
	}
	d.tl.Add(timeline.Event{Name: timeline.EvWait, Step: d.steps, Bucket: -1, Start: waitStart, End: time.Now()})
	if len(errs) > 0 {
		return fmt.Errorf("%s: step %d: %w", d.who(), d.steps, errors.Join(errs...))
	}
	if d.cfg.rebuild && !d.rebuilt {
		if err := d.rebuild(ctx); err != nil {
			return fmt.Errorf("%s: step %d: %w", d.who(), d.steps, err)
		}
	}
	d.steps++
	return nil
}

// rebuild re-cuts the buckets from rank 0's arrival order of this step.
func (d *DDP) rebuild(ctx context.Context) error {
	d.rebuilt = true
	arrived := d.st.arrived
	var cuts []int
	keep := len(arrived) == 0
	if !keep {
		cuts = bucketcut.ByArrival(gradBytes(d.flat), arrived, d.cfg.firstBucket, d.cfg.bucketCap, d.cfg.lastBucket)
	}
	cuts, keep, err := shareCuts(ctx, d.g, len(d.flat), cuts, keep)
	if err != nil {
		return err
	}
	if !keep {
		d.buckets, d.byParam = layout(d.flat, d.Model.Params.Grad, cuts)
		return d.be.Layout(d.buckets)
	}
	return nil
}

// preMark marks the parameters known to get no gradient before the tape runs, so that
// their buckets need not wait for the end of backward.
func (d *DDP) preMark(graphUnused []*nn.Param) error {
	if !d.st.sync {
		return nil
	}
	if d.cfg.findUnused || d.cfg.staticGraph {
		for _, p := range graphUnused {
			if err := d.markReady(p); err != nil {
				return err
			}
		}
	}
	if d.cfg.staticGraph && d.staticSeen {
		for i, un := range d.static {
			if un && !d.st.ready[i] {
				if err := d.markReady(d.Model.Params.Params[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
