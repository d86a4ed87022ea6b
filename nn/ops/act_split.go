package ops

import (
	"runtime"
	"sync"
)

// splitGrain is the fewest elements worth a goroutine in an elementwise kernel: below it the
// start-up (about a microsecond) costs more than the work saved.
const splitGrain = 1 << 15

// splitRun runs f over [0, n) in up to GOMAXPROCS contiguous chunks, the calling goroutine
// taking the first. The elementwise kernels (GELU, ReLU, normalisations) would otherwise run
// on one core while the GEMMs around them use every thread. Chunk bounds are multiples of 16
// elements so that no two chunks write one cache line.
func splitRun(n int, f func(lo, hi int)) { splitRows(n, 1, f) }

// splitRows is splitRun over n rows of rowLen elements each, split at row bounds; each
// chunk has at least splitGrain elements.
func splitRows(n, rowLen int, f func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), n*rowLen/splitGrain, n)
	if w <= 1 {
		f(0, n)
		return
	}
	bound := func(i int) int {
		if i == w {
			return n
		}
		if rowLen == 1 {
			return (i * n / w) &^ 15
		}
		return i * n / w
	}
	var wg sync.WaitGroup
	wg.Add(w - 1)
	for i := 1; i < w; i++ {
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(bound(i), bound(i+1))
	}
	f(0, bound(1))
	wg.Wait()
}
