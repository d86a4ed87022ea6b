package simd_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
)

// TestGemmGather checks GemmGather32 against the same products summed in table order with
// fused multiply-adds, bit for bit, at every width the micro-kernels take (1 to 4 vectors, a
// masked last one), row counts that leave remainders; that nothing is
// written past n; and that it refuses what it cannot read.
func TestGemmGather(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		rng := rand.New(rand.NewSource(3))
		for _, sh := range [][3]int{{1, 1, 1}, {13, 16, 7}, {12, 17, 40}, {25, 33, 9}, {7, 48, 100}, {19, 64, 33}, {6, 70, 20}, {30, 150, 11}} {
			m, n, k := sh[0], sh[1], sh[2]
			np := (n + 15) / 16 * 16
			lda, ldc := 29, n+3
			arows := 50
			a := make([]float32, (m-1)*lda+arows)
			for i := range a {
				a[i] = rng.Float32()*2 - 1
			}
			brows := 37
			bp := make([]float32, brows*np)
			for r := 0; r < brows; r++ {
				for j := 0; j < n; j++ {
					bp[r*np+j] = rng.Float32()*2 - 1
				}
			}
			ka, kb := make([]int32, k), make([]int32, k)
			for kk := range ka {
				ka[kk], kb[kk] = int32(rng.Intn(arows)), int32(rng.Intn(brows)*np)
			}
			c := make([]float32, m*ldc)
			for i := range c {
				c[i] = rng.Float32()
			}
			want := append([]float32(nil), c...)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var acc float32
					for kk := range ka {
						acc = float32(math.FMA(float64(a[i*lda+int(ka[kk])]), float64(bp[int(kb[kk])+j]), float64(acc)))
					}
					want[i*ldc+j] = acc
				}
			}
			ok := simd.GemmGather32(m, n, a, lda, ka, bp, kb, c, ldc)
			if ok != (lv == simd.AVX512) {
				t.Fatalf("%v: GemmGather32 took it: %v", sh, ok)
			}
			if !ok {
				continue
			}
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v: c[%d] = %g, want %g (row %d, column %d)", sh, i, c[i], want[i], i/ldc, i%ldc)
				}
			}
		}
		// Refusals: an index past a or bp (a row of bp shorter than n rounded up to 16),
		// tables of different lengths.
		a, bp, c := make([]float32, 10), make([]float32, 32), make([]float32, 16)
		for _, tc := range []struct {
			name   string
			n      int
			ka, kb []int32
		}{{"a", 16, []int32{10}, []int32{0}}, {"bp", 16, []int32{0}, []int32{17}}, {"bp vector", 9, []int32{0}, []int32{20}},
			{"negative", 16, []int32{-1}, []int32{0}}, {"lengths", 16, []int32{0, 1}, []int32{0}}} {
			if simd.GemmGather32(1, tc.n, a, 1, tc.ka, bp, tc.kb, c, 16) {
				t.Errorf("%s: GemmGather32 took a product it cannot read", tc.name)
			}
		}
	})
}
