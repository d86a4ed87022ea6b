package simd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// TestBNGradSelMatchesMaskFirst: BNGradSums and BNGradApply given ReLU's selector equal,
// bit for bit (any NaN matching any NaN), the same kernels on dy masked first by ReLUSel,
// at every level this CPU runs, on plane sizes around the vector widths, odd and even sample
// counts (the AVX2 sums pair planes), with special values (±0, ±Inf, NaN, subnormals) in x,
// dy and the selector.
func TestBNGradSelMatchesMaskFirst(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	ran := false
	for _, l := range []Level{AVX2, AVX512} {
		if Supported(l) != nil {
			continue
		}
		ran = true
		restore, err := Set(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, hw := range []int{1, 3, 7, 8, 9, 15, 16, 17, 25, 49, 64, 196} {
			for _, nc := range [][2]int{{1, 1}, {2, 3}, {3, 2}, {5, 3}} {
				n, c := nc[0], nc[1]
				size := n * c * hw
				x, dy := nxSpecials32(rng, size, 2, true), nxSpecials32(rng, size, 1, true)
				sel := nxSpecials32(rng, size, 1, true)
				mean, k1, k2, k3 := nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c)
				k2[0], k3[0] = 0, 0 // the k1·dy-only path
				masked := make([]float32, size)
				if !ReLUSel(dy, masked, sel) {
					t.Fatalf("%v: ReLUSel did not run", l)
				}
				what := fmt.Sprintf("%v n=%d c=%d hw=%d", l, n, c, hw)
				s1, sx1, s2, sx2 := make([]float64, c), make([]float64, c), make([]float64, c), make([]float64, c)
				BNGradSums(x, dy, sel, n, c, hw, 0, c, mean, s1, sx1)
				BNGradSums(x, masked, nil, n, c, hw, 0, c, mean, s2, sx2)
				selSame64(t, what+" BNGradSums Σdy", s1, s2)
				selSame64(t, what+" BNGradSums Σdy·x", sx1, sx2)
				d1, d2 := make([]float32, size), make([]float32, size)
				BNGradApply(x, dy, sel, d1, c, hw, 0, n*c, k1, k2, k3)
				BNGradApply(x, masked, nil, d2, c, hw, 0, n*c, k1, k2, k3)
				for i := range d1 {
					if math.Float32bits(d1[i]) != math.Float32bits(d2[i]) && !(d1[i] != d1[i] && d2[i] != d2[i]) {
						t.Fatalf("%s BNGradApply: [%d] = %g with the selector, %g masked first", what, i, d1[i], d2[i])
					}
				}
			}
		}
		restore()
	}
	if !ran {
		t.Skip("no SIMD level on this CPU and build")
	}
}

func selSame64(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s: [%d] = %.17g with the selector, %.17g masked first", what, i, got[i], want[i])
		}
	}
}
