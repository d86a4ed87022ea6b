package ops

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The kernels split their work across Threads() goroutines several hundred times per
// training step of a ResNet (every convolution, normalisation and activation forks and
// joins). Starting a goroutine for each part wakes an idle OS thread, and on a virtual
// machine a parked thread's vCPU halts: waking it took about 60 µs here, a good part of a
// small kernel. The pool below keeps Threads()-1 workers that, after a job, poll for the
// next one for a short while (poolSpin) before they park, so the parts of back-to-back
// kernels start without a wake-up; a caller waiting for its workers polls likewise before
// it blocks. Nothing spins once the kernels stop: the workers park after poolSpin.

// poolSpin is how long an idle worker, or a caller waiting for one, polls before it
// blocks.
var poolSpin = 200 * time.Microsecond

// poolJob is one fork: f(wi) for the workers 1..n-1 that take part.
type poolJob struct {
	f       func(wi int)
	pending atomic.Int32 // workers that have not finished yet
	parked  atomic.Bool  // the caller blocks on wake
	wake    chan struct{}
}

// poolWorker is one of the pool's goroutines.
type poolWorker struct {
	job    atomic.Pointer[poolJob]
	wi     int
	parked atomic.Bool
	wake   chan struct{} // buffered (1): a token for a parked worker
}

// workerPool is a set of poolWorkers that one fork at a time uses.
type workerPool struct {
	mu      sync.Mutex // held by the fork using the workers; others run without them
	workers []*poolWorker
}

// newWorkerPool starts n workers.
func newWorkerPool(n int) *workerPool {
	p := &workerPool{}
	for wi := 1; wi <= n; wi++ {
		w := &poolWorker{wi: wi, wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		go w.loop()
	}
	return p
}

// defaultPool is ForkJoin's pool of Threads()-1 workers, started on first use.
var defaultPool = sync.OnceValue(func() *workerPool { return newWorkerPool(threads() - 1) })

// loop runs the jobs handed to w, polling for poolSpin after each before it parks.
func (w *poolWorker) loop() {
	for {
		j := w.poll()
		if j == nil {
			w.parked.Store(true)
			if j = w.job.Load(); j == nil {
				<-w.wake
				w.parked.Store(false)
				continue
			}
			w.parked.Store(false)
		}
		w.job.Store(nil)
		j.f(w.wi)
		if j.pending.Add(-1) == 0 && j.parked.Load() {
			select {
			case j.wake <- struct{}{}:
			default:
			}
		}
	}
}

// poll returns the next job, or nil after poolSpin without one.
func (w *poolWorker) poll() *poolJob {
	start := time.Now()
	for i := 0; ; i++ {
		if j := w.job.Load(); j != nil {
			return j
		}
		if i&63 == 63 {
			if time.Since(start) > poolSpin {
				return nil
			}
			runtime.Gosched()
		}
	}
}

// ForkJoin runs f(0) on the calling goroutine and f(1), ..., f(n-1) on the pool of
// Threads()-1 workers that the kernels split their work across (or on new goroutines when
// another ForkJoin holds the pool, as a nested one does, or n exceeds Threads()), and
// returns when all have. Code outside this package that splits elementwise work per step
// (gradient accumulation, optimizers) uses it to start its parts without a thread wake-up.
func ForkJoin(n int, f func(i int)) {
	if n <= 1 {
		f(0)
		return
	}
	defaultPool().forkJoin(n, f)
}

// forkJoin is ForkJoin on p.
func (p *workerPool) forkJoin(n int, f func(i int)) {
	if n-1 > len(p.workers) || !p.mu.TryLock() {
		var wg sync.WaitGroup
		wg.Add(n - 1)
		for wi := 1; wi < n; wi++ {
			go func() {
				defer wg.Done()
				f(wi)
			}()
		}
		f(0)
		wg.Wait()
		return
	}
	defer p.mu.Unlock()
	// A fresh job per fork (two small allocations): a worker that finds the caller parked
	// sends its token after the decrement the caller may already have seen, so a reused
	// channel could hand that late token to the next fork's caller.
	j := &poolJob{f: f, wake: make(chan struct{}, 1)}
	j.pending.Store(int32(n - 1))
	for _, w := range p.workers[:n-1] {
		w.job.Store(j)
		if w.parked.Load() {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
	f(0)
	start := time.Now()
	for i := 0; j.pending.Load() != 0; i++ {
		if i&63 == 63 {
			if time.Since(start) > poolSpin {
				j.parked.Store(true)
				if j.pending.Load() != 0 {
					<-j.wake
				}
				return
			}
			runtime.Gosched()
		}
	}
}
