package tape_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/optim"
)

// gradState is a device State of the gorgonia MLP whose gradient buffer holds g (the
// buffer's length; see gradValues).
func gradState(t *testing.T) (*tape.State, int) {
	t.Helper()
	m := graphModel(t, gormlp.Fixed(1, 8))
	st, err := tape.NewState(device(t), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st, len(m.Params.Grad)
}

// gradValues are n gradients of mixed sign and magnitude (1e-3 to 1e3).
func gradValues(n int) []float32 {
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(math.Sin(float64(i)*0.37)) * float32(math.Pow(10, float64(i%7)-3))
	}
	return g
}

// UnscaleGrads equals amp.GradScaler.Unscale on the host bit for bit (the same float32
// product) and flags an inf, a NaN, or a product that overflows, as the host does.
func TestUnscaleGradsMatchesScaler(t *testing.T) {
	ctx := context.Background()
	st, n := gradState(t)
	cases := []struct {
		name  string
		scale float32
		poke  func(g []float32)
	}{
		{"clean", 1024, func([]float32) {}},
		{"inf", 65536, func(g []float32) { g[n/2] = float32(math.Inf(-1)) }},
		{"nan", 65536, func(g []float32) { g[n-1] = float32(math.NaN()) }},
		{"overflow", 0.25, func(g []float32) { g[3] = 2e38 }}, // 2e38·4 is past float32's range
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host := gradValues(n)
			c.poke(host)
			if err := st.Grads().CopyFrom(host); err != nil {
				t.Fatal(err)
			}
			sc, err := amp.NewGradScaler(amp.WithInitScale(float64(c.scale)))
			if err != nil {
				t.Fatal(err)
			}
			want := sc.Unscale(host)
			got, err := st.UnscaleGrads(ctx, c.scale)
			if err != nil {
				t.Fatal(err)
			}
			if got != want || got != (c.name != "clean") {
				t.Fatalf("found inf/NaN = %v, host scaler %v (case %s)", got, want, c.name)
			}
			dev, err := st.Grads().ToHost(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range host {
				if math.Float32bits(dev[i]) != math.Float32bits(host[i]) && !(host[i] != host[i] && dev[i] != dev[i]) {
					t.Fatalf("gradient %d: device %g, host %g", i, dev[i], host[i])
				}
			}
		})
	}
}

// GradNorm equals the float64 norm of the host values within 1e-12 relative (both sum in
// float64, in different orders); ClipGradNorm returns the norm and scales the gradients
// exactly as optim.ClipGradNormSq does on the host (the factor is optim.ClipCoef's), and a
// non-finite norm is optim's error with the gradients left bit for bit as they were.
func TestClipGradNormMatchesHost(t *testing.T) {
	ctx := context.Background()
	st, n := gradState(t)
	host := gradValues(n)
	var sq float64
	for _, x := range host {
		sq += float64(x) * float64(x)
	}
	norm := math.Sqrt(sq)
	if err := st.Grads().CopyFrom(host); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GradNorm(ctx); err != nil || math.Abs(got-norm) > 1e-12*norm {
		t.Fatalf("norm %v (%v), host %v", got, err, norm)
	}
	for _, maxNorm := range []float64{norm / 4, norm * 2} {
		if err := st.Grads().CopyFrom(host); err != nil {
			t.Fatal(err)
		}
		got, err := st.ClipGradNorm(ctx, maxNorm)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), host...)
		wantNorm, err := optim.ClipGradNormSq([]optim.Segment{{Name: "g", Grad: want}}, maxNorm, sq)
		if err != nil {
			t.Fatal(err)
		}
		if got != wantNorm {
			t.Fatalf("norm %v, optim's %v", got, wantNorm)
		}
		dev, err := st.Grads().ToHost(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range host {
			if dev[i] != want[i] {
				t.Fatalf("max norm %g: gradient %d: device %g, optim %g", maxNorm, i, dev[i], want[i])
			}
		}
	}
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
		g := append([]float32(nil), host...)
		g[7] = bad
		if err := st.Grads().CopyFrom(g); err != nil {
			t.Fatal(err)
		}
		_, want := optim.ClipGradNorm([]optim.Segment{{Name: "g", Grad: append([]float32(nil), g...)}}, 1)
		got, err := st.ClipGradNorm(ctx, 1)
		if err == nil || want == nil || !strings.Contains(err.Error(), want.Error()) {
			t.Fatalf("gradient %v: norm %v, error %v; want optim's error %q", bad, got, err, want)
		}
		dev, err := st.Grads().ToHost(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range g {
			if math.Float32bits(dev[i]) != math.Float32bits(g[i]) {
				t.Fatalf("gradient %v: element %d changed to %g by a refused clip", bad, i, dev[i])
			}
		}
	}
}

// On a buffer of many blocks (100003 values: the partial sums of every block of the grid,
// a ragged last one), the device's sum of squares equals the host's float64 sum within
// 1e-12 relative, and an inf in the last element is counted once.
func TestSumSquaresManyBlocks(t *testing.T) {
	ctx := context.Background()
	d := device(t)
	host := gradValues(100003)
	var sq float64
	for _, x := range host {
		sq += float64(x) * float64(x)
	}
	x, err := d.FromHost(host, len(host))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	got, err := d.SumSquares(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-sq) > 1e-12*sq {
		t.Fatalf("sum of squares %v on the device, %v on the host", got, sq)
	}
	host[len(host)-1] = float32(math.Inf(1))
	if err := x.CopyFrom(host); err != nil {
		t.Fatal(err)
	}
	if n, err := d.UnscaleNonFinite(ctx, x, 0.5); err != nil || n != 1 {
		t.Fatalf("UnscaleNonFinite = %d, %v; want 1 (one inf)", n, err)
	}
}
