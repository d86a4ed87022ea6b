package nn

import (
	"context"
	"math"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
)

// specialValues are gradients whose sum with zero is not the value itself (-0, a
// signalling NaN) or that must survive it exactly (a NaN payload, subnormals, infinities).
var specialValues = []float32{
	float32(math.Copysign(0, -1)), 0, 1.5, -2.25,
	math.Float32frombits(0x7f800001), // signalling NaN
	math.Float32frombits(0xffc00123), // quiet NaN, negative, with a payload
	math.Float32frombits(1),          // smallest subnormal
	math.Float32frombits(0x807fffff), // largest negative subnormal
	float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.SmallestNonzeroFloat32,
}

func TestGradStoreIsAddToZero(t *testing.T) {
	for _, n := range []int{1, 7, 8, 63, 64, 100, gradStoreChunk, gradStoreChunk + 13, 3*gradStoreChunk + 5} {
		g := make([]float32, n)
		for i := range g {
			g[i] = specialValues[i%len(specialValues)]
			if i%5 == 4 {
				g[i] = float32(i) * 0.37
			}
		}
		want := make([]float32, n)
		simd.AddTo(want, g)
		got := make([]float32, n)
		for i := range got {
			got[i] = 42 // gradStore must not read dst
		}
		gradStore(got, g)
		for i := range g {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d [%d]: gradient %#x stored as %#x, adding it to zero gives %#x", n, i, math.Float32bits(g[i]), math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	}
}

// specialNet has a parameter w whose gradient is the input x (loss = sum(w·x)) and a
// parameter the graph never uses.
type specialNet struct{ w, unused *Param }

func (s *specialNet) Declare(sc *Scope) error {
	s.w = sc.Param("w", []int{len(specialValues)}, nil)
	s.unused = sc.Param("unused", []int{3}, nil)
	return nil
}

func (s *specialNet) Forward(b *Builder, x *G.Node) (*G.Node, error) { return x, nil }

func buildSpecial(net *specialNet) BuildFunc {
	return func(b *Builder) (*G.Node, error) {
		x, err := b.Input("x", len(specialValues))
		if err != nil {
			return nil, err
		}
		w, err := b.Param(net.w)
		if err != nil {
			return nil, err
		}
		return G.Sum(G.Must(G.HadamardProd(w, x)))
	}
}

// TestGradStoreSameBits runs the same sequence of Runs and ZeroGrads with the first write
// after ZeroGrad stored and with it added, and wants the same gradient bits after every
// step: accumulation over Runs, ZeroGrad through the ParamSet and the Program, a parameter
// the graph does not use (it must read zero), a private buffer (WithGradBuffer), and
// gradients of -0, NaN, subnormals and infinities.
func TestGradStoreSameBits(t *testing.T) {
	const (
		run      = "run"
		zeroPS   = "ParamSet.ZeroGrad"
		zeroProg = "Program.ZeroGrad"
		dirty    = "write 7 into the unused parameter's gradient"
	)
	tests := []struct {
		name    string
		special bool
		private bool
		steps   []string
	}{
		{"one run", false, false, []string{run}},
		{"two runs accumulate", false, false, []string{run, run}},
		{"three runs accumulate", false, false, []string{run, run, run}},
		{"run, ZeroGrad, run", false, false, []string{run, zeroPS, run, run}},
		{"Program.ZeroGrad between", false, false, []string{run, run, zeroProg, run, zeroProg, run, run, run}},
		{"ZeroGrad only", false, false, []string{run, zeroPS}},
		{"private buffer", false, true, []string{run, run, zeroProg, run}},
		{"special values, one run", true, false, []string{run}},
		{"special values accumulate", true, false, []string{run, run, run, zeroPS, run, run}},
		{"special values, private buffer", true, true, []string{run, run, zeroProg, run}},
		{"unused parameter written then ZeroGrad", true, false, []string{dirty, zeroPS, run, dirty, run, zeroProg, run}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var trace [2][][]uint32
			for k, off := range []bool{false, true} {
				gradStoreOff.Store(off)
				trace[k] = gradTrace(t, tc.special, tc.private, tc.steps)
			}
			gradStoreOff.Store(false)
			for s := range trace[0] {
				for i := range trace[0][s] {
					if trace[0][s][i] != trace[1][s][i] {
						t.Fatalf("after step %d (%s), gradient element %d: %#x stored, %#x added", s, tc.steps[s], i, trace[0][s][i], trace[1][s][i])
					}
				}
			}
		})
	}
}

// gradTrace builds a fresh model, performs steps and returns the bits of the program's
// gradient buffer after each; it checks that the unused parameter reads zero after a Run
// that follows ZeroGrad.
func gradTrace(t *testing.T, special, private bool, steps []string) [][]uint32 {
	t.Helper()
	var (
		m     *Model
		build BuildFunc
		net   *specialNet
		err   error
	)
	if special {
		net = &specialNet{}
		m, err = NewModel(net)
		build = buildSpecial(net)
	} else {
		m, err = NewModel(smallNet(), WithSeed(2))
		build = classify(3, 6, 5)
	}
	if err != nil {
		t.Fatal(err)
	}
	buf := m.Params.Grad
	var opts []BuildOption
	if private {
		buf = make([]float32, len(m.Params.Grad))
		opts = append(opts, WithGradBuffer(buf))
	}
	p, err := Compile(m, build, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out [][]uint32
	zeroed := true
	for s, step := range steps {
		switch step {
		case "run":
			if special {
				x, err := p.Input("x")
				if err != nil {
					t.Fatal(err)
				}
				for i := range x {
					x[i] = specialValues[(i+s)%len(specialValues)]
				}
			} else {
				fill(t, p, int64(10+s))
			}
			if err := p.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if zeroed && net != nil {
				for i, g := range net.unused.Grad {
					if math.Float32bits(g) != 0 {
						t.Fatalf("step %d: unused gradient [%d] reads %#x after a Run that followed ZeroGrad", s, i, math.Float32bits(g))
					}
				}
			}
			zeroed = false
		case "ParamSet.ZeroGrad":
			m.Params.ZeroGrad()
			clear(buf) // a private buffer is the caller's to zero
			zeroed = true
		case "Program.ZeroGrad":
			if err := p.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			zeroed = true
		default:
			net.unused.Grad[0] = 7
			zeroed = false
		}
		bits := make([]uint32, len(buf))
		for i, g := range buf {
			bits[i] = math.Float32bits(g)
		}
		out = append(out, bits)
	}
	return out
}
