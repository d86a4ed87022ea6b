package gpucheck

import (
	"math"
	"math/rand/v2"
	"os"
	"sort"
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

// randLabels draws n class labels below classes.
func randLabels(r *rand.Rand, n, classes int) []int32 {
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(r.IntN(classes))
	}
	return labels
}

// floatLabels converts class labels to the float class indices models.Run takes.
func floatLabels(labels []int32) []float32 {
	lf := make([]float32, len(labels))
	for i, l := range labels {
		lf[i] = float32(l)
	}
	return lf
}

// errRow is one tensor's relative error against the CPU.
type errRow struct {
	name string
	err  float64
}

// checkErrs fails the rows whose error is above gradTol and logs the worst few that pass.
func checkErrs(t *testing.T, rows []errRow, worst int) {
	t.Helper()
	sort.Slice(rows, func(i, j int) bool { return rows[i].err > rows[j].err })
	for i, rw := range rows {
		if !(rw.err <= gradTol) {
			t.Errorf("%s: relative error %.3g > %.0e", rw.name, rw.err, gradTol)
		} else if i < worst {
			t.Logf("worst: %s rel err %.2g", rw.name, rw.err)
		}
	}
}

// realGPUOnly skips t on the CPU emulator (GPUCHECK_EMULATED=1: TestOnCPUEmulator's child,
// or EMULATE=1 run.sh), where what reason names would take minutes or time the emulator.
func realGPUOnly(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv(emulatedVar) == "1" {
		t.Skipf("on the CPU emulator: %s is checked on a real GPU only", reason)
	}
}
