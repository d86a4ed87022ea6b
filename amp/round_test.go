package amp

import (
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type roundFixture struct {
	Torch string   `json:"torch"`
	Input []uint32 `json:"input"`
	BF16  []uint32 `json:"bf16"`
	FP16  []uint32 `json:"fp16"`
}

func loadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Bit-exact against torch 1.13's .to(torch.bfloat16) and .half() (testdata/make_fixtures.py).
// NaN is compared as NaN-ness only: torch's own NaN bit patterns differ between its
// vectorised and scalar paths.
func TestRoundMatchesTorch(t *testing.T) {
	var fx roundFixture
	loadJSON(t, "testdata/round.json", &fx)
	for _, tc := range []struct {
		f    Format
		want []uint32
	}{{BF16, fx.BF16}, {FP16, fx.FP16}} {
		t.Run(tc.f.String(), func(t *testing.T) {
			in := make([]float32, len(fx.Input))
			for i, b := range fx.Input {
				in[i] = math.Float32frombits(b)
			}
			out := make([]float32, len(in))
			RoundSlice32(tc.f, out, in)
			bad := 0
			for i, v := range in {
				got, want := math.Float32bits(out[i]), tc.want[i]
				w := math.Float32frombits(want)
				if w != w {
					if out[i] == out[i] {
						t.Errorf("%v (%#08x): got %v, torch NaN", v, fx.Input[i], out[i])
					}
					continue
				}
				if got != want {
					if bad++; bad < 10 {
						t.Errorf("%g (%#08x): got %g (%#08x), torch %g (%#08x)", v, fx.Input[i], out[i], got, w, want)
					}
				}
				if r := Round32(tc.f, v); math.Float32bits(r) != got {
					t.Errorf("Round32(%g) = %g, RoundSlice32 %g", v, r, out[i])
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d values differ from torch %s", bad, len(in), fx.Torch)
			}
		})
	}
}

// Round64 (the float64 path) agrees with the float32 bit tricks on float32 inputs, on random
// bit patterns of every exponent.
func TestRound64AgreesWithRound32(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, f := range []Format{BF16, FP16} {
		for i := 0; i < 200000; i++ {
			v := math.Float32frombits(rng.Uint32())
			if v != v {
				continue
			}
			r32 := Round32(f, v)
			r64 := Round64(f, float64(v))
			if float64(r32) != r64 || math.Signbit(float64(r32)) != math.Signbit(r64) {
				t.Fatalf("%v %g (%#08x): Round32 %g, Round64 %g", f, v, math.Float32bits(v), r32, r64)
			}
		}
	}
}

func TestRound64Cases(t *testing.T) {
	tests := []struct {
		f       Format
		in, out float64
	}{
		{FP16, 65504, 65504},
		{FP16, 65519.999, 65504},
		{FP16, 65520, math.Inf(1)},
		{FP16, -70000, math.Inf(-1)},
		{FP16, 0x1p-24, 0x1p-24},
		{FP16, 0x1p-25, 0},                  // tie between 0 and 2^-24: even is 0
		{FP16, 0x3p-25, 0x2p-24},            // tie between 1 and 2 steps: even is 2
		{FP16, 0x1.0000000001p-25, 0x1p-24}, // just above the tie; float32 would round it to the tie first
		{FP16, -0x1p-26, math.Copysign(0, -1)},
		{BF16, 1 + 0x1p-8, 1},                    // tie to even
		{BF16, 1 + 0x3p-8, 1 + 0x1p-6},           // tie to even (up)
		{BF16, 1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-7}, // above the tie only in float64
		{BF16, 0x1p-133, 0x1p-133},
		{BF16, 0x1p-134, 0},
		{BF16, 0x1.ffp127, math.Inf(1)},
		{BF16, math.Inf(-1), math.Inf(-1)},
	}
	for _, tc := range tests {
		if got := Round64(tc.f, tc.in); got != tc.out || math.Signbit(got) != math.Signbit(tc.out) {
			t.Errorf("Round64(%v, %x) = %x, want %x", tc.f, tc.in, got, tc.out)
		}
	}
	if !math.IsNaN(Round64(FP16, math.NaN())) || !math.IsNaN(float64(Round32(BF16, float32(math.NaN())))) {
		t.Error("NaN must stay NaN")
	}
}

// The op rounds forward and rounds the incoming gradient backward (exactly), in float32 and
// float64.
func TestRoundOpForwardBackward(t *testing.T) {
	for _, f := range []Format{BF16, FP16} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			t.Run(f.String()+"/"+dt.String(), func(t *testing.T) {
				rng := rand.New(rand.NewSource(2))
				g := G.NewGraph()
				x := gradcheck.Input(g, dt, rng, "x", 3, 5)
				r := gradcheck.Input(g, dt, rng, "r", 3, 5)
				y, err := Round(x, f)
				if err != nil {
					t.Fatal(err)
				}
				prod, err := G.HadamardProd(y, r)
				if err != nil {
					t.Fatal(err)
				}
				cost, err := G.Sum(prod)
				if err != nil {
					t.Fatal(err)
				}
				grads, err := G.Grad(cost, x)
				if err != nil {
					t.Fatal(err)
				}
				m := G.NewTapeMachine(g)
				defer m.Close()
				for run := 0; run < 2; run++ { // the second run reuses the op's buffers
					if err := m.RunAll(); err != nil {
						t.Fatal(err)
					}
					xs, ys, rs, gs := vals(x), vals(y), vals(r), vals(grads[0])
					for i := range xs {
						if want := Round64(f, xs[i]); ys[i] != want {
							t.Fatalf("forward [%d]: round(%g) = %g, want %g", i, xs[i], ys[i], want)
						}
						if want := Round64(f, rs[i]); gs[i] != want {
							t.Fatalf("backward [%d]: got %g, want round(%g) = %g", i, gs[i], rs[i], want)
						}
					}
					m.Reset()
				}
			})
		}
	}
}

// The straight-through backward is the derivative of the rounded function at the scale of
// its steps: gradcheck's central differences with a step (0.5) much larger than the format's
// spacing near N(0,1) values agree with it to about spacing/step, and not at all with a
// step (1e-6) far below the spacing (numeric gradient 0 or huge): rounding is piecewise
// constant, which is why its gradient is defined as straight-through.
func TestRoundOpGradcheckStraightThrough(t *testing.T) {
	build := func(f Format) gradcheck.BuildFunc {
		return func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
			x := gradcheck.Input(g, dt, rng, "x", 4, 6)
			y, err := Round(x, f)
			return G.Nodes{x}, y, err
		}
	}
	tests := []struct {
		f      Format
		eps    float64
		maxRel float64
		fails  bool
	}{
		{BF16, 0.5, 2e-2, false},
		{FP16, 0.5, 2e-3, false},
		{BF16, 1e-6, 0.5, true},
	}
	for _, tc := range tests {
		res, err := gradcheck.Check(build(tc.f), gradcheck.Options{Eps: tc.eps})
		if err != nil {
			t.Fatal(err)
		}
		if failed := res.MaxRel > tc.maxRel; failed != tc.fails {
			t.Errorf("%v eps %g: %v (want failure=%v at %g)", tc.f, tc.eps, res, tc.fails, tc.maxRel)
		}
	}
	rel, err := gradcheck.Precision(build(FP16), 3)
	if err != nil {
		t.Fatal(err)
	}
	if rel != 0 {
		t.Errorf("float32 and float64 rounding differ on float32-representable inputs: rel %g", rel)
	}
}

func TestRoundErrors(t *testing.T) {
	g := G.NewGraph()
	s := G.NewScalar(g, tensor.Float32, G.WithName("s"))
	i := G.NewTensor(g, tensor.Int, 1, G.WithShape(3), G.WithName("i"))
	x := G.NewTensor(g, tensor.Float32, 1, G.WithShape(3), G.WithName("x"))
	for name, fn := range map[string]func() (*G.Node, error){
		"scalar": func() (*G.Node, error) { return Round(s, BF16) },
		"int":    func() (*G.Node, error) { return Round(i, BF16) },
		"nil":    func() (*G.Node, error) { return Round(nil, BF16) },
		"format": func() (*G.Node, error) { return Round(x, Format(7)) },
	} {
		if _, err := fn(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func vals(n *G.Node) []float64 {
	switch d := n.Value().Data().(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out
	case []float64:
		return d
	}
	return nil
}

func TestRoundSlice32CountsOverflow(t *testing.T) {
	in := []float32{1, 70000, float32(math.Inf(1)), -65520, float32(math.NaN()), 3.4e38}
	out := make([]float32, len(in))
	if n := RoundSlice32(FP16, out, in); n != 3 {
		t.Errorf("fp16 overflow count %d, want 3", n)
	}
	if n := RoundSlice32(BF16, out, in); n != 1 {
		t.Errorf("bf16 overflow count %d, want 1 (3.4e38)", n)
	}
}

// TestRoundOpSplit: a float32 tensor big enough to be split across threads (3 here, as a
// 3-core machine would) rounds to the same bits as one pass over it, in both formats.
func TestRoundOpSplit(t *testing.T) {
	prev := roundThreads
	roundThreads = func() int { return 3 }
	defer func() { roundThreads = prev }()
	n := 3*roundGrain + 17
	rng := rand.New(rand.NewSource(4))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*8))
	}
	for _, f := range []Format{BF16, FP16} {
		want := make([]float32, n)
		RoundSlice32(f, want, src)
		x := tensor.New(tensor.WithShape(n), tensor.WithBacking(append([]float32(nil), src...)))
		op := &roundOp{format: f}
		got, err := op.Do(x)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got.Data().([]float32) {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Fatalf("%v element %d of %d: %g split, %g in one pass", f, i, n, v, want[i])
			}
		}
	}
}
