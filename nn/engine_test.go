package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The machine's Add gives gorgonia's bits in every case, into the tensor gorgonia would
// write: the simd path (reuse, in place) and the cases it hands back (safe, WithIncr,
// a reuse that is b, float64, broadcasting shapes).
func TestEngineAddMatchesGorgonia(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -3.4e38, 3.4e38, float32(math.Inf(1)), float32(math.Inf(-1)), 1.5, -2.25}
	fill := func(n int, seed uint64) []float32 {
		r := rand.New(rand.NewPCG(seed, 1))
		s := make([]float32, n)
		for i := range s {
			if i%5 == 0 {
				s[i] = special[r.IntN(len(special))]
			} else {
				s[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-4)))
			}
		}
		return s
	}
	dense := func(s []float32, shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float32(nil), s...)), tensor.WithEngine(engine{}))
	}
	for _, tc := range []struct {
		name string
		n    int
		mode string // reuse, reuseA, reuseB, unsafe, safe, incr
	}{
		{"reuse 1", 1, "reuse"}, {"reuse 7", 7, "reuse"}, {"reuse 64", 64, "reuse"}, {"reuse 100003", 100003, "reuse"},
		{"reuse is a", 1000, "reuseA"}, {"reuse is b", 1000, "reuseB"},
		{"unsafe 5", 5, "unsafe"}, {"unsafe 4099", 4099, "unsafe"}, {"unsafe a+a", 300, "self"},
		{"safe", 333, "safe"}, {"incr", 333, "incr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs, ys, rs := fill(tc.n, 1), fill(tc.n, 2), fill(tc.n, 3)
			run := func(e tensor.Engine) []float32 {
				mk := func(s []float32) *tensor.Dense {
					d := dense(s, tc.n)
					tensor.WithEngine(e)(d)
					return d
				}
				a, b, r := mk(xs), mk(ys), mk(rs)
				var opts []tensor.FuncOpt
				var want tensor.Tensor // the tensor the result must be
				switch tc.mode {
				case "reuse":
					opts, want = []tensor.FuncOpt{tensor.WithReuse(r)}, r
				case "reuseA":
					opts, want = []tensor.FuncOpt{tensor.WithReuse(a)}, a
				case "reuseB":
					opts, want = []tensor.FuncOpt{tensor.WithReuse(b)}, b
				case "unsafe":
					opts, want = []tensor.FuncOpt{tensor.UseUnsafe()}, a
				case "self":
					opts, want, b = []tensor.FuncOpt{tensor.UseUnsafe()}, a, a
				case "incr":
					opts, want = []tensor.FuncOpt{tensor.WithIncr(r)}, r
				}
				out, err := tensor.Add(a, b, opts...)
				if err != nil {
					t.Fatalf("%T: %v", e, err)
				}
				if want != nil && out != want {
					t.Errorf("%T: the result is not the tensor the options name", e)
				}
				return out.Data().([]float32)
			}
			got, want := run(engine{}), run(G.StandardEngine{})
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("[%d] = %v (%#x), gorgonia's %v (%#x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		})
	}
	t.Run("float64 and broadcast go to gorgonia", func(t *testing.T) {
		a := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{1, 2, 3}), tensor.WithEngine(engine{}))
		b := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{0.5, 0.25, 0.125}), tensor.WithEngine(engine{}))
		out, err := tensor.Add(a, b, tensor.UseUnsafe())
		if err != nil || out.Data().([]float64)[2] != 3.125 {
			t.Errorf("float64: %v, %v", out, err)
		}
		m := dense([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		v := dense([]float32{1, 1, 1, 1, 1, 1}, 3, 2)
		if _, ok := addFloat32(m, v, []tensor.FuncOpt{tensor.UseUnsafe()}); ok {
			t.Errorf("shapes (2, 3) and (3, 2): the simd path took them")
		}
	})
}
