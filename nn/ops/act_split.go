package ops

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// splitGrain is the fewest elements worth a goroutine in an elementwise kernel: below it the
// start-up (about a microsecond) costs more than the work saved.
const splitGrain = 1 << 15

// Threads is the number of goroutines the elementwise kernels use: GP_NUM_THREADS, else
// OMP_NUM_THREADS, else OPENBLAS_NUM_THREADS (so that they follow the BLAS, as PyTorch's
// intra-op threads follow OMP_NUM_THREADS; gprun sets it to 1 per worker), else GOMAXPROCS.
func Threads() int {
	for _, v := range []string{"GP_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"} {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
			return min(n, runtime.GOMAXPROCS(0))
		}
	}
	return runtime.GOMAXPROCS(0)
}

var threadsOnce = sync.OnceValue(Threads)

// testThreads, when positive, replaces Threads() in the kernels: the tests set it (with a
// pool to match) to run the multi-threaded paths whatever the environment says.
var testThreads atomic.Int32

// threads is Threads(), read once, or testThreads.
func threads() int {
	if n := testThreads.Load(); n > 0 {
		return int(n)
	}
	return threadsOnce()
}

// splitRun runs f over [0, n) in up to Threads() contiguous chunks, the calling goroutine
// taking the first. The elementwise kernels (GELU, ReLU, normalisations) would otherwise run
// on one core while the GEMMs around them use every thread. Chunk bounds are multiples of 16
// elements so that no two chunks write one cache line.
func splitRun(n int, f func(lo, hi int)) { splitRows(n, 1, f) }

// splitRows is splitRun over n rows of rowLen elements each, split at row bounds; each
// chunk has at least splitGrain elements.
func splitRows(n, rowLen int, f func(lo, hi int)) {
	w := min(threads(), n*rowLen/splitGrain, n)
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
	ForkJoin(w, func(i int) { f(bound(i), bound(i+1)) })
}
