package ops

import (
	"math/rand"
	"slices"
	"testing"
)

// TestNormKernelsThreadCount: the BatchNorm and LayerNorm kernels give bit-identical results
// at 1 and 3 threads (their sums keep one order whatever the split), on tensors large
// enough to be split.
func TestNormKernelsThreadCount(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const n, c, hw = 3, 5, 1 << 13
	x, dy := make([]float32, n*c*hw), make([]float32, n*c*hw)
	for i := range x {
		x[i], dy[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	per := func(f func(i int) float64) []float64 {
		v := make([]float64, c)
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	mean, istd := per(func(i int) float64 { return 0.1 * float64(i) }), per(func(i int) float64 { return 1 + 0.2*float64(i) })
	gamma, beta := per(func(i int) float64 { return 0.5 + float64(i) }), per(func(i int) float64 { return -float64(i) })
	run := func(threads int) [][]float64 {
		setTestThreads(t, threads)
		sum, sq, sdy, sdyx := make([]float64, c), make([]float64, c), make([]float64, c), make([]float64, c)
		y, dx := make([]float32, len(x)), make([]float32, len(x))
		bnSums(x, n, c, hw, sum, sq)
		bnApply(x, y, n, c, hw, mean, istd, gamma, beta, false)
		bnGradSums(x, dy, nil, n, c, hw, mean, sdy, sdyx)
		bnGradApply(x, dy, nil, dx, n, c, hw, gamma, istd, beta)
		// LayerNorm over rows of 96 (Swin-T's width).
		const m = 96
		ln := &lnOp{m: m, rows: len(x) / m, eps: 1e-5, mean: make([]float64, len(x)/m), istd: make([]float64, len(x)/m),
			gamma: make([]float64, m), beta: make([]float64, m), dgamma: make([]float64, m), dbeta: make([]float64, m)}
		for j := range m {
			ln.gamma[j], ln.beta[j] = 1+0.01*float64(j), 0.02*float64(j)
		}
		ly, ldx := make([]float32, len(x)), make([]float32, len(x))
		lnForward(x, ly, ln)
		lnBackward(x, dy, ldx, ln)
		out := [][]float64{sum, sq, sdy, sdyx, ln.dgamma, ln.dbeta}
		for _, v := range [][]float32{y, dx, ly, ldx} {
			w := make([]float64, len(v))
			for i, e := range v {
				w[i] = float64(e)
			}
			out = append(out, w)
		}
		return out
	}
	one, three := run(1), run(3)
	for i := range one {
		if !slices.Equal(one[i], three[i]) {
			t.Errorf("output %d differs between 1 and 3 threads", i)
		}
	}
}
