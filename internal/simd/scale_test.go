package simd

import (
	"math"
	"math/rand"
	"testing"
)

// TestScaleDivMatchGo checks the vector kernels against the Go loops bit for bit, on odd
// lengths and on values that stress rounding (subnormals, huge, NaN, ±0, ±Inf).
func TestScaleDivMatchGo(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, 3e38, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
		for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 1000, 4099} {
			x := make([]float32, n)
			for i := range x {
				if i < len(special) {
					x[i] = special[i]
				} else {
					x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(60)-30)))
				}
			}
			for _, f := range []float32{0.5, 0.25, 1.0 / 3, 3, 1e-30} {
				a, b := append([]float32(nil), x...), append([]float32(nil), x...)
				Scale(a, f)
				scaleGo(b, f)
				sameScaled(t, "Scale", n, f, a, b)
				a, b = append([]float32(nil), x...), append([]float32(nil), x...)
				Div(a, f)
				divGo(b, f)
				sameScaled(t, "Div", n, f, a, b)
			}
		}
	})
}

func sameScaled(t *testing.T, op string, n int, f float32, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("%s n=%d by %g: element %d = %g, Go loop %g", op, n, f, i, a[i], b[i])
		}
	}
}
