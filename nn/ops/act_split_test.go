package ops

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestSplitRunCovers: the chunks cover [0, n) exactly once, for sizes around the grain and
// several thread counts.
func TestSplitRunCovers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 17, splitGrain - 1, 2 * splitGrain, 3*splitGrain + 7, 9*splitGrain + 5} {
			hits := make([]atomic.Int32, n)
			splitRun(n, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("GOMAXPROCS %d, n %d: element %d run %d times", procs, n, i, h)
				}
			}
		}
	}
}
