package simd_test

import (
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// TestGemmRowsAnyWidth runs GemmRows32 (with and without a bias) and GemmRowsAdd32 at level
// AVX512 on products whose column count 16 does not divide (a last panel of 1 to 15
// columns, read and written under a mask) and on whole panels, both forms of b, inner
// dimensions below, at and across the kernel's blocks of 128, and row counts below, at and
// across its 8-row micro-kernel and 64-row chunks. Each element must be within k·2⁻²³ of
// Σ|a·b| (plus the bias or c's start, once rounded) of a float64 product, and c's columns
// past n (ldc > n) and the rows past m must keep their values: the masked stores write
// nothing beyond n.
func TestGemmRowsAnyWidth(t *testing.T) {
	restore, err := simd.Set(simd.AVX512)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(restore)
	rng := rand.New(rand.NewSource(2))
	for _, m := range []int{1, 9, 70} {
		for _, n := range []int{1, 3, 15, 17, 47, 49, 64, 100, 147} {
			for _, k := range []int{1, 5, 128, 300} {
				for _, tB := range []bool{false, true} {
					for _, mode := range []string{"set", "bias", "add"} {
						lda, ldc := k+3, n+5
						ldb := n + 2
						if tB {
							ldb = k + 1
						}
						a := randNormF32(rng, m*lda)
						b := randNormF32(rng, max(k*ldb, n*ldb))
						c := randNormF32(rng, (m+1)*ldc)
						c0 := append([]float32(nil), c...)
						var bias []float32
						if mode == "bias" {
							bias = randNormF32(rng, n)
						}
						var ok bool
						if mode == "add" {
							ok = simd.GemmRowsAdd32(tB, m, n, k, a, lda, b, ldb, c, ldc)
						} else {
							ok = simd.GemmRows32(tB, m, n, k, a, lda, b, ldb, bias, c, ldc)
						}
						if !ok {
							t.Fatalf("m %d n %d k %d tB %v %s: refused", m, n, k, tB, mode)
						}
						for i := range m + 1 {
							for j := range ldc {
								got := c[i*ldc+j]
								if i == m || j >= n {
									if math.Float32bits(got) != math.Float32bits(c0[i*ldc+j]) {
										t.Fatalf("m %d n %d k %d tB %v %s: c[%d][%d] past the product written", m, n, k, tB, mode, i, j)
									}
									continue
								}
								var want, mag float64
								for p := range k {
									bv := b[p*ldb+j]
									if tB {
										bv = b[j*ldb+p]
									}
									ab := float64(a[i*lda+p]) * float64(bv)
									want += ab
									mag += math.Abs(ab)
								}
								switch mode {
								case "bias":
									want += float64(bias[j])
									mag += math.Abs(float64(bias[j]))
								case "add":
									want += float64(c0[i*ldc+j])
									mag += math.Abs(float64(c0[i*ldc+j]))
								}
								if tol := (float64(k)+2)*math.Ldexp(1, -23)*mag + 1e-30; math.Abs(float64(got)-want) > tol {
									t.Fatalf("m %d n %d k %d tB %v %s: c[%d][%d] = %g, want %g ± %g", m, n, k, tB, mode, i, j, got, want, tol)
								}
							}
						}
					}
				}
			}
		}
	}
}

// randNormF32 is n standard normal float32s.
func randNormF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
