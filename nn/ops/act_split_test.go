package ops

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"gorgonia.org/tensor"
)

// TestSplitRunCovers: the chunks cover [0, n) exactly once, for sizes around the grain and
// several thread counts.
func TestSplitRunCovers(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint(threads), func(t *testing.T) {
			setTestThreads(t, threads)
			for _, n := range []int{0, 1, 17, splitGrain - 1, 2 * splitGrain, 3*splitGrain + 7, 9*splitGrain + 5} {
				hits := make([]atomic.Int32, n)
				splitRun(n, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("%d threads, n %d: element %d run %d times", threads, n, i, h)
					}
				}
			}
		})
	}
}

// TestSplitKernelsThreadCount: the split elementwise kernels (dropout masks, equal-shape
// Add, GELU, ReLU) give bit-identical results at 1 and 3 threads.
func TestSplitKernelsThreadCount(t *testing.T) {
	const n = 5*splitGrain + 3
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i%97)-48, float32(i%13)*0.25
	}
	var plan bcastPlan
	plan.init(tensor.Shape{n}, tensor.Shape{n}, tensor.Shape{n})
	run := func(threads int) [][]float32 {
		setTestThreads(t, threads)
		outs := make([][]float32, 5)
		for i := range outs {
			outs[i] = make([]float32, n)
		}
		applyMask(a, outs[0], 42, 0.3, 1)
		applyMask(a[:4*splitGrain], outs[1][:4*splitGrain], 42, 0.5, splitGrain/2)
		addKernel(a, b, outs[2], &plan)
		unaryFwd(actGELU, a, outs[3])
		unaryBwd(actReLU, a, b, outs[4])
		return outs
	}
	one, three := run(1), run(3)
	for i := range one {
		if !slices.Equal(one[i], three[i]) {
			t.Errorf("kernel %d differs between 1 and 3 threads", i)
		}
	}
}
