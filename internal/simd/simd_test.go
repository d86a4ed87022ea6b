package simd

import (
	"math"
	"math/rand"
	"testing"
)

// TestKernelsMatchGo: the C kernels (when enabled) equal the Go loops bit for bit, on
// lengths around the vector width and minLen, including 0 and 1, and write nothing past
// the end.
func TestKernelsMatchGo(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 100, 1000, 4097} {
			mk := func() []float32 {
				s := make([]float32, n+1)
				for i := range s {
					s[i] = float32(rng.NormFloat64())
				}
				return s
			}
			w, g, mom := mk(), mk(), mk()
			w2, mom2 := append([]float32(nil), w...), append([]float32(nil), mom...)
			SGDMomentum(w[:n], g[:n], mom[:n], 0.01, 0.9)
			sgdMomentumGo(w2[:n], g[:n], mom2[:n], 0.01, 0.9)
			same(t, n, "SGDMomentum w", w2, w)
			same(t, n, "SGDMomentum mom", mom2, mom)
			d, d2 := append([]float32(nil), w...), append([]float32(nil), w...)
			AddTo(d, g[:n])
			addToGo(d2, g[:n])
			same(t, n, "AddTo", d2, d)
		}
	})
}

func same(t *testing.T, n int, what string, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Errorf("n=%d %s: [%d] = %g, want %g", n, what, i, got[i], want[i])
			return
		}
	}
}
