package ops

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkerPoolRunsEachPartOnce forks on a pool of 3 workers from several goroutines at
// once (so that some forks find the pool busy and fall back to goroutines), with nested
// forks, parts slower than the spin (the caller parks), and pauses longer than the spin
// between forks (the workers park): every part of every fork must run exactly once and
// before its fork returns.
func TestWorkerPoolRunsEachPartOnce(t *testing.T) {
	p := newWorkerPool(3)
	cases := []struct {
		name       string
		callers    int
		n          int
		nested     bool
		slowPart   time.Duration // how long part 1 takes
		pause      time.Duration // between a caller's forks
		iterations int
	}{
		{"one caller, all workers", 1, 4, false, 0, 0, 2000},
		{"fewer parts than workers", 1, 2, false, 0, 0, 2000},
		{"more parts than workers", 1, 7, false, 0, 0, 500},
		{"concurrent callers", 4, 4, false, 0, 0, 500},
		{"nested forks", 2, 3, true, 0, 0, 300},
		{"caller parks", 1, 4, false, 3 * poolSpin, 0, 20},
		{"workers park", 1, 4, false, 0, 3 * poolSpin, 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, c.callers)
			for range c.callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for it := range c.iterations {
						counts := make([]atomic.Int32, c.n)
						inner := make([]atomic.Int32, c.n*c.n)
						p.forkJoin(c.n, func(i int) {
							if i == 1 && c.slowPart > 0 {
								time.Sleep(c.slowPart)
							}
							if c.nested {
								p.forkJoin(c.n, func(k int) { inner[i*c.n+k].Add(1) })
							}
							counts[i].Add(1)
						})
						for i := range counts {
							if got := counts[i].Load(); got != 1 {
								errs <- fmt.Errorf("iteration %d: part %d of %d ran %d times", it, i, c.n, got)
								return
							}
						}
						for i := range inner {
							if want := int32(0); c.nested {
								want = 1
								if got := inner[i].Load(); got != want {
									errs <- fmt.Errorf("iteration %d: nested part %d ran %d times", it, i, got)
									return
								}
							}
						}
						if c.pause > 0 {
							time.Sleep(c.pause)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestForkJoinSerial: with one part, ForkJoin runs it on the calling goroutine and no pool
// is needed.
func TestForkJoinSerial(t *testing.T) {
	ran := 0
	ForkJoin(1, func(i int) { ran += i + 1 })
	if ran != 1 {
		t.Fatalf("ForkJoin(1) ran part 0 %d times", ran)
	}
}

// setTestThreads makes the kernels split across n threads, on a pool of n-1 workers, until
// the test ends (Threads() follows the environment, which runs the tests at one thread).
func setTestThreads(t *testing.T, n int) {
	t.Helper()
	prevPool, p := defaultPool, newWorkerPool(n-1)
	defaultPool = func() *workerPool { return p }
	testThreads.Store(int32(n))
	t.Cleanup(func() {
		testThreads.Store(0)
		defaultPool = prevPool
	})
}
