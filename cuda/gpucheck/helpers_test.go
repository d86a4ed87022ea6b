package gpucheck

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
)

// need skips the test when err says there is no GPU, unless REQUIRE_GPU=1.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("REQUIRE_GPU") == "1" {
		t.Fatalf("REQUIRE_GPU=1 but %s: %v", what, err)
	}
	t.Skipf("no GPU (%s): %v", what, err)
}

var shared *cuda.Device

// device opens device 0 once for the whole binary.
func device(t *testing.T) *cuda.Device {
	t.Helper()
	if shared == nil {
		d, err := cuda.Open(0)
		need(t, "opening device 0", err)
		shared = d
		impl, why := d.ConvImplInUse()
		t.Logf("device 0: %s; convolution: %v (%v)", d.Name(), impl, why)
	}
	return shared
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * scale)
	}
	return out
}

// relErr is max|got-want| / max|want|: the error relative to the result's scale, the measure
// every tolerance here is stated in (elementwise relative error is meaningless near zero).
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	if den == 0 {
		return num
	}
	return num / den
}

func upload(t *testing.T, d *cuda.Device, data []float32, shape ...int) *cuda.Tensor {
	t.Helper()
	x, err := d.FromHost(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Free)
	return x
}

func alloc(t *testing.T, d *cuda.Device, dt cuda.DType, shape ...int) *cuda.Tensor {
	t.Helper()
	x, err := d.Alloc(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Free)
	return x
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
