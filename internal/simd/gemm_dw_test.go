package simd_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
)

// dwBlock is the block of k rows GemmDW32's doc comment states.
const dwBlock = 128

// refDW is GemmDW32's documented order of operations in Go: per element, k in blocks of
// dwBlock rows, each block a chain of fused multiply-adds from zero (float32's fma as the
// float64 fma rounded to float32: a·b is exact in float64, and the inputs are fixed, so the
// rare double rounding would show as a failure every run, not a flake), then stored or added.
func refDW(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := range m {
		for j := range n {
			var sum float32
			for k0 := 0; k0 < k; k0 += dwBlock {
				var acc float32
				for p := k0; p < min(k, k0+dwBlock); p++ {
					acc = float32(math.FMA(float64(a[p*lda+i]), float64(b[p*ldb+j]), float64(acc)))
				}
				if k0 == 0 {
					sum = acc
				} else {
					sum += acc
				}
			}
			c[i*ldc+j] = sum
		}
	}
}

// TestGemmDWMatchesReference runs GemmDW32 at every level the CPU has on shapes with m not a
// multiple of the strips (8 at AVX-512, 6 at AVX2), k not a multiple of the block, last
// panels of 16 and 32 columns, strides wider than the rows, and compares bit for bit with
// refDW; the padding between c's rows must stay untouched. Each result must also be the
// same bits when c's columns are split into two calls (as gemmPar's threads split them).
func TestGemmDWMatchesReference(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, lv simd.Level) {
		rng := rand.New(rand.NewSource(7))
		for _, s := range []struct{ m, n, k, split int }{
			{96, 96, 1000, 48},
			{288, 96, 513, 32},
			{13, 80, 129, 48},
			{20, 48, 300, 16},
			{5, 16, 1, 0},
			{3, 32, 128, 16},
			{8, 112, 256, 64},
		} {
			lda, ldb, ldc := s.m+3, s.n+5, s.n+2
			a := make([]float32, s.k*lda)
			b := make([]float32, s.k*ldb)
			for _, v := range [][]float32{a, b} {
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
			}
			want := make([]float32, s.m*ldc)
			got := make([]float32, s.m*ldc)
			for i := range got {
				got[i], want[i] = -7, -7
			}
			refDW(s.m, s.n, s.k, a, lda, b, ldb, want, ldc)
			ran := simd.GemmDW32(s.m, s.n, s.k, a, lda, b, ldb, got, ldc)
			if ran != (lv != simd.Off) {
				t.Fatalf("%v %+v: GemmDW32 ran = %v", lv, s, ran)
			}
			if !ran {
				continue
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v %+v: c[%d][%d] = %v, want %v", lv, s, i/ldc, i%ldc, got[i], want[i])
				}
			}
			if s.split == 0 {
				continue
			}
			parts := make([]float32, s.m*ldc)
			for i := range parts {
				parts[i] = -7
			}
			if !simd.GemmDW32(s.m, s.split, s.k, a, lda, b, ldb, parts, ldc) ||
				!simd.GemmDW32(s.m, s.n-s.split, s.k, a, lda, b[s.split:], ldb, parts[s.split:], ldc) {
				t.Fatalf("%v %+v: a split call did not run", lv, s)
			}
			for i := range parts {
				if math.Float32bits(parts[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%v %+v split at column %d: c[%d][%d] = %v, whole call %v", lv, s, s.split, i/ldc, i%ldc, parts[i], got[i])
				}
			}
		}
	})
}

// TestGemmDWRefuses: shapes the kernel does not take leave c untouched and report false.
func TestGemmDWRefuses(t *testing.T) {
	c := []float32{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}
	a := make([]float32, 64)
	for _, s := range []struct{ m, n, k, lda, ldb, ldc int }{
		{1, 24, 1, 1, 24, 24}, // n not a multiple of 16
		{1, 16, 0, 1, 16, 16}, // no rows of k
		{2, 16, 1, 1, 16, 16}, // lda < m
		{1, 16, 1, 1, 8, 16},  // ldb < n
	} {
		if simd.GemmDW32(s.m, s.n, s.k, a, s.lda, a, s.ldb, c, s.ldc) {
			t.Fatalf("%+v: GemmDW32 took it", s)
		}
	}
	for i, v := range c {
		if v != 5 {
			t.Fatalf("c[%d] = %v after refused calls", i, v)
		}
	}
}
