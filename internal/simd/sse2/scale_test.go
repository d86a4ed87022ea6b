package sse2

import (
	"math"
	"math/rand"
	"testing"
)

// TestScaleF32: bit-identical to Go's multiplication for every length up to 40 (the tail
// left to the caller untouched), with subnormals, infinities and NaNs among the inputs.
func TestScaleF32(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, float32(math.Inf(1)), float32(math.NaN()), math.MaxFloat32}
	for n := range 41 {
		for _, s := range []float32{0.5, 0.25, 1.0 / 3, 3} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64()) * float32(math.Pow(2, float64(rng.Intn(60)-30)))
				if rng.Intn(5) == 0 {
					x[i] = specials[rng.Intn(len(specials))]
				}
			}
			want := make([]float32, n)
			copy(want, x)
			done := ScaleF32(x, s)
			for i := range want[:done] {
				want[i] *= s
			}
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d, s %g: element %d is %g, want %g", n, s, i, x[i], want[i])
				}
			}
		}
	}
}
