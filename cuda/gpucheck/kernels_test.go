package gpucheck

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
)

// Tolerances: float32 kernels agree with a float64 CPU reference to 1e-5 of the result's
// scale (a few float32 ulps after reductions of a few thousand terms); 16-bit results to 1e-2
// (bf16 has 8 significant bits).
const tol32, tol16 = 1e-5, 1e-2

func check(t *testing.T, name string, d *cuda.Device, y *cuda.Tensor, want []float64, tol float64) {
	t.Helper()
	got, err := y.ToHost(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if e := relErr(got, want); !(e <= tol) {
		t.Errorf("%s: relative error %.3g > %.0g", name, e, tol)
	} else {
		t.Logf("%-22s rel err %.2g", name, e)
	}
}

func TestElementwiseVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1<<16 + 3 // not a multiple of the block
	a, b := randn(r, n, 2), randn(r, n, 2)
	da, db := upload(t, d, a, n), upload(t, d, b, n)
	y := alloc(t, d, cuda.Float32, n)
	ew := func(f func(x, y float64) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(float64(a[i]), float64(b[i]))
		}
		return out
	}
	gelu := func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }
	cases := []struct {
		name string
		run  func() error
		want []float64
	}{
		{"add", func() error { return d.Add(y, da, db) }, ew(func(x, y float64) float64 { return x + y })},
		{"sub", func() error { return d.Sub(y, da, db) }, ew(func(x, y float64) float64 { return x - y })},
		{"mul", func() error { return d.Mul(y, da, db) }, ew(func(x, y float64) float64 { return x * y })},
		{"scale", func() error { return d.Scale(y, da, 0.25) }, ew(func(x, _ float64) float64 { return 0.25 * x })},
		{"relu", func() error { return d.ReLU(y, da) }, ew(func(x, _ float64) float64 { return math.Max(x, 0) })},
		{"relu backward", func() error { return d.ReLUBackward(y, db, da) }, ew(func(x, g float64) float64 {
			if x > 0 {
				return g
			}
			return 0
		})},
		{"gelu", func() error { return d.GELU(y, da) }, ew(func(x, _ float64) float64 { return gelu(x) })},
		{"gelu backward", func() error { return d.GELUBackward(y, db, da) }, ew(func(x, g float64) float64 {
			return g * (0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi))
		})},
		{"fill", func() error { return d.Fill(y, 3.5) }, ew(func(_, _ float64) float64 { return 3.5 })},
	}
	for _, c := range cases {
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		check(t, c.name, d, y, c.want, tol32)
	}
	// axpby in place: y = 2*a + 0.5*y with y = b.
	yb := upload(t, d, b, n)
	if err := d.Axpby(yb, da, 2, 0.5); err != nil {
		t.Fatal(err)
	}
	check(t, "axpby", d, yb, ew(func(x, y float64) float64 { return 2*x + 0.5*y }), tol32)
}

// The device rounding is bit-identical to amp.Round32 (itself bit-exact with torch), overflow
// and subnormals included; casts to 16-bit storage and back give the same values.
func TestRoundingMatchesAmp(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(3, 4))
	x := randn(r, 4096, 1000)
	x = append(x, 65504, 65520, 65519.99, -70000, 1e-8, 6e-8, 3e-39, float32(math.Inf(1)), 0x1.fep127, 0x1.ffp127)
	dx := upload(t, d, x, len(x))
	y := alloc(t, d, cuda.Float32, len(x))
	for _, f := range []struct {
		dev cuda.Format
		amp amp.Format
		dt  cuda.DType
	}{{cuda.BF16, amp.BF16, cuda.BFloat16}, {cuda.FP16, amp.FP16, cuda.Float16}} {
		if err := d.Round(y, dx, f.dev); err != nil {
			t.Fatal(err)
		}
		got, err := y.ToHost(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h := alloc(t, d, f.dt, len(x))
		if err := d.Cast(h, dx); err != nil {
			t.Fatal(err)
		}
		viaCast, err := h.ToHost(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, v := range x {
			w := amp.Round32(f.amp, v)
			if math.Float32bits(got[i]) != math.Float32bits(w) || math.Float32bits(viaCast[i]) != math.Float32bits(w) {
				if bad++; bad < 5 {
					t.Errorf("%v: round(%g) = %g (cast %g), amp says %g", f.amp, v, got[i], viaCast[i], w)
				}
			}
		}
		t.Logf("%v rounding: %d values, %d mismatches", f.amp, len(x), bad)
	}
	inf := upload(t, d, []float32{1, float32(math.NaN()), float32(math.Inf(-1)), 2}, 4)
	if n, err := d.NonFinite(context.Background(), inf); err != nil || n != 2 {
		t.Fatalf("NonFinite = %d, %v; want 2", n, err)
	}
}
