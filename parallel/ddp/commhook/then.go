package commhook

import (
	"context"
	"errors"
	"sync"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Then returns a Work that completes after w has completed and then fn has run (on its own
// goroutine, so it overlaps whatever the caller does meanwhile). fn does not run when w
// fails; the Work then reports w's error. Hooks use it to decompress a result.
func Then(w comm.Work, fn func() error) comm.Work {
	return chain(func(t *chainWork) error {
		if err := t.track(w).Wait(context.Background()); err != nil {
			return err
		}
		return fn()
	})
}

// chainWork is the Work of a goroutine that runs collectives one after the other and
// computes between them (Then's fn, PowerSGD's rounds): it completes when the goroutine
// returns, with its error.
type chainWork struct {
	done chan struct{}
	err  error
	mu   sync.Mutex
	cur  comm.Work // the collective in flight, for Wait to abort
}

// chain runs fn on a goroutine of its own and returns its Work; fn tracks each collective
// it issues.
func chain(fn func(*chainWork) error) *chainWork {
	w := &chainWork{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = fn(w)
	}()
	return w
}

// track makes c the collective Wait aborts, and returns it.
func (w *chainWork) track(c comm.Work) comm.Work {
	w.mu.Lock()
	w.cur = c
	w.mu.Unlock()
	return c
}

func (w *chainWork) Done() <-chan struct{} { return w.done }

// Wait waits for the goroutine; when ctx ends first it aborts the collective in flight (the
// buffers are in use) and waits for the goroutine to stop.
func (w *chainWork) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	w.mu.Lock()
	c := w.cur
	w.mu.Unlock()
	if c != nil {
		_ = c.Wait(ctx)
	}
	<-w.done
	if w.err == nil {
		return nil
	}
	return errors.Join(w.err, ctx.Err())
}
