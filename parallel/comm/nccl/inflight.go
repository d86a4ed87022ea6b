package nccl

import (
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Note [Collectives in flight]: a device-resident collective needs no host wait to be
// issued: its inputs are ordered by the caller's event and its result by the done event. So
// the worker issues each one as it arrives, records an event of its own after it, and goes
// on with the next, keeping up to maxInFlight issued; it retires them in issue order as
// their events complete, each checked against the communicator's asynchronous error as a
// host wait is. A host operation (staged through the worker's pinned buffers) or a barrier
// first retires every collective in flight, then runs alone as before. The stream runs the
// collectives in issue order, as every rank issues them, so results are those of one at a
// time; each still fails at its own timeout, counted from when it was issued, and a
// failure poisons the group, so every collective after it fails with the same cause.

// maxInFlight bounds the device collectives issued and not yet retired (DDP's buckets of a
// step, ZeRO-3's prefetched units).
const maxInFlight = 8

// flight is an issued device collective.
type flight struct {
	o        *task
	ev       driver.Event // recorded on the worker's stream after the collective
	deadline time.Time
	polls    int
}

// start issues o: a device collective joins the flight, anything else waits for the flight
// to land and runs to completion.
func (w *worker) start(o *task) {
	if perr := w.poisoned(); perr != nil {
		o.err = perr
		o.finish()
		return
	}
	if o.dev == 0 {
		w.land()
		if perr := w.poisoned(); perr != nil {
			o.err = perr
			o.finish()
			return
		}
		w.complete(o, w.exec(o, w.execInner))
		return
	}
	ev, err := w.event()
	if err != nil {
		w.complete(o, w.opError(o, err))
		return
	}
	if err := w.exec(o, func(o *task) error { return w.issue(o, ev) }); err != nil {
		w.free = append(w.free, ev)
		w.complete(o, err)
		return
	}
	o.enqueued()
	w.flight = append(w.flight, flight{o: o, ev: ev, deadline: time.Now().Add(w.timeout)})
}

// issue enqueues a device collective after its wait event, and its done event and ev after it.
func (w *worker) issue(o *task, ev driver.Event) error {
	c := w.g.ctx
	if o.waitEv != 0 {
		if err := c.StreamWaitEvent(w.stream, o.waitEv); err != nil {
			return err
		}
	}
	if err := w.devCollective(o); err != nil {
		return err
	}
	if o.doneEv != 0 {
		if err := c.EventRecord(o.doneEv, w.stream); err != nil {
			return err
		}
	}
	return c.EventRecord(ev, w.stream)
}

// complete records o's outcome: a failure poisons the group, naming the poison first when
// another cause (a Wait's context, a timeout) poisoned it already.
func (w *worker) complete(o *task, err error) {
	if err != nil {
		if perr := w.poisoned(); perr != nil {
			err = fmt.Errorf("%w (%w)", perr, err)
		}
		w.setPoison(err)
	}
	o.err = err
	o.finish()
}

// retireHead checks the oldest collective in flight and retires it when it has completed or
// failed; it reports whether it did.
func (w *worker) retireHead() bool {
	f := &w.flight[0]
	done, err := w.check(f)
	if !done {
		return false
	}
	w.free = append(w.free, f.ev)
	o := f.o
	w.flight[0] = flight{}
	w.flight = w.flight[1:]
	w.complete(o, w.opError(o, err))
	return true
}

// check is wait's test for one collective in flight: done once its event has completed
// (the result is valid only when the communicator reports no error) or it failed.
func (w *worker) check(f *flight) (bool, error) {
	ok, err := w.g.ctx.EventQuery(f.ev)
	if err != nil {
		return true, err
	}
	if ok {
		if err := w.comm.AsyncError(); err != nil {
			w.abort(err)
			return true, err
		}
		return true, w.poisoned()
	}
	if perr := w.poisoned(); perr != nil {
		return true, perr
	}
	if f.polls++; f.polls%64 == 0 {
		if err := w.comm.AsyncError(); err != nil {
			w.abort(err)
			return true, err
		}
	}
	if time.Now().After(f.deadline) {
		err := fmt.Errorf("%s: %w after %v", f.o.describe(), comm.ErrTimeout, w.timeout)
		w.abort(err)
		return true, err
	}
	return false, nil
}

// land retires every collective in flight, in order.
func (w *worker) land() {
	sleep := time.Microsecond
	for len(w.flight) > 0 {
		if w.retireHead() {
			sleep = time.Microsecond
			continue
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 200*time.Microsecond)
	}
}

// event is a free completion event, created on first need.
func (w *worker) event() (driver.Event, error) {
	if n := len(w.free); n > 0 {
		ev := w.free[n-1]
		w.free = w.free[:n-1]
		return ev, nil
	}
	ev, err := w.g.ctx.EventCreate(false)
	if err != nil {
		return 0, fmt.Errorf("a completion event: %w", err)
	}
	w.events = append(w.events, ev)
	return ev, nil
}

// destroyEvents frees every completion event (the flight has landed).
func (w *worker) destroyEvents() {
	for _, ev := range w.events {
		_ = w.g.ctx.EventDestroy(ev)
	}
	w.events, w.free = nil, nil
}
