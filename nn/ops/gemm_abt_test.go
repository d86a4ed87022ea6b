package ops

import (
	"math"
	"math/rand"
	"testing"
)

// TestGemmABtMatchesGemm compares gemmABt, in both of its orientations (odd sizes, inner
// dimensions on either side of gemmABtInner, row strides wider than the rows), with gemm's
// c = a·bᵀ.
func TestGemmABtMatchesGemm(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, s := range [][3]int{{5, 37, 1031}, {37, 5, 1031}, {7, 19, 1023}, {17, 147, 2050}, {1, 3, 1024}, {33, 33, 1100}} {
		m, n, k := s[0], s[1], s[2]
		lda, ldb, ldc := k+3, k+1, n+2
		a := make([]float64, m*lda)
		b := make([]float64, n*ldb)
		for i := range a {
			a[i] = rng.NormFloat64()
		}
		for i := range b {
			b[i] = rng.NormFloat64()
		}
		want := make([]float64, m*ldc)
		got := make([]float64, m*ldc)
		for i := range got {
			got[i], want[i] = -7, -7 // the padding between rows must stay untouched
		}
		gemm(false, true, m, n, k, 1, a, lda, b, ldb, 0, want, ldc)
		var tr gemmScratch
		gemmABt(&tr, m, n, k, a, lda, b, ldb, got, ldc)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-10*(1+math.Abs(want[i])) {
				t.Fatalf("%v: c[%d] = %v, want %v", s, i, got[i], want[i])
			}
		}
		a32 := make([]float32, len(a))
		b32 := make([]float32, len(b))
		for i := range a {
			a32[i] = float32(a[i])
		}
		for i := range b {
			b32[i] = float32(b[i])
		}
		w32 := make([]float32, m*ldc)
		g32 := make([]float32, m*ldc)
		gemm(false, true, m, n, k, 1, a32, lda, b32, ldb, 0, w32, ldc)
		gemmABt(&tr, m, n, k, a32, lda, b32, ldb, g32, ldc)
		for i := range g32 {
			if math.Abs(float64(g32[i]-w32[i])) > 1e-4*(1+math.Abs(float64(w32[i]))) {
				t.Fatalf("%v float32: c[%d] = %v, want %v", s, i, g32[i], w32[i])
			}
		}
	}
}
