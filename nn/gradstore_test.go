package nn

import (
	"context"
	"math"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
)

// specialValues are gradients whose sum with zero is not the value itself (-0) or that the
// sum must keep exactly (a NaN payload, subnormals, infinities, the extremes).
var specialValues = []float32{
	float32(math.Copysign(0, -1)), 0, 1.5, -2.25,
	math.Float32frombits(0xffc00123), // quiet NaN, negative, with a payload
	math.Float32frombits(1),          // smallest subnormal
	math.Float32frombits(0x807fffff), // largest negative subnormal
	float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.SmallestNonzeroFloat32,
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

// TestGradientWritesAddToTheBuffer pins what every consumer of the gradient buffer reads:
// a Run adds each gradient into the buffer (simd.AddTo), starting from the zeros of
// construction or ZeroGrad, so after ZeroGrad and one Run a -0 gradient reads +0 and a NaN
// keeps its payload, Runs accumulate in order, and a parameter the graph does not use reads
// zero after ZeroGrad, and what code outside a Run wrote into the buffer (before the first
// Run, between ZeroGrad and a Run, between Runs) is added to. A change that stores the first
// gradient instead of adding it must keep these bits. The reference is the sequence of additions done by hand on the inputs,
// which are w's gradients (d sum(w·x)/dw = x·1, exact).
func TestGradientWritesAddToTheBuffer(t *testing.T) {
	const (
		run      = "run"
		zeroPS   = "ParamSet.ZeroGrad"
		zeroProg = "Program.ZeroGrad"
		dirty    = "write 7 into both gradients"
	)
	tests := []struct {
		name    string
		private bool
		steps   []string
	}{
		{"one run", false, []string{run}},
		{"two runs accumulate", false, []string{run, run}},
		{"three runs accumulate", false, []string{run, run, run}},
		{"ParamSet.ZeroGrad between", false, []string{run, run, zeroPS, run, run}},
		{"Program.ZeroGrad between", false, []string{run, zeroProg, run, zeroProg, run, run, run}},
		{"ZeroGrad after the last run", false, []string{run, run, zeroPS}},
		{"written outside a run, then ZeroGrad", false, []string{dirty, zeroPS, run, dirty, run, zeroProg, run}},
		{"written outside a run accumulates", false, []string{run, dirty, run}},
		{"written before the first run", false, []string{dirty, run, run}},
		{"written between ZeroGrad and a run", false, []string{run, zeroPS, dirty, run}},
		{"private buffer", true, []string{run, run, zeroProg, run, dirty, run}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			net := &specialNet{}
			m, err := NewModel(net)
			if err != nil {
				t.Fatal(err)
			}
			buf := m.Params.Grad
			var opts []BuildOption
			if tc.private {
				buf = make([]float32, len(m.Params.Grad))
				opts = append(opts, WithGradBuffer(buf))
			}
			p, err := Compile(m, buildSpecial(net), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			w := buf[net.w.Offset : net.w.Offset+len(net.w.Data)]
			unused := buf[net.unused.Offset : net.unused.Offset+len(net.unused.Data)]
			wantW := make([]float32, len(w))
			wantUnused := make([]float32, len(unused))
			for s, step := range tc.steps {
				switch step {
				case run:
					x, err := p.Input("x")
					if err != nil {
						t.Fatal(err)
					}
					for i := range x {
						x[i] = specialValues[(i+s)%len(specialValues)]
					}
					if err := p.Run(context.Background()); err != nil {
						t.Fatal(err)
					}
					simd.AddTo(wantW, x)
				case zeroPS:
					m.Params.ZeroGrad()
					if tc.private {
						clear(buf) // a private buffer is its owner's to zero
					}
					clear(wantW)
					clear(wantUnused)
				case zeroProg:
					if err := p.ZeroGrad(); err != nil {
						t.Fatal(err)
					}
					clear(wantW)
					clear(wantUnused)
				case dirty:
					w[0], unused[0] = 7, 7
					wantW[0], wantUnused[0] = 7, 7
				}
				for _, c := range []struct {
					name      string
					got, want []float32
				}{{"w", w, wantW}, {"unused", unused, wantUnused}} {
					for i := range c.want {
						if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
							t.Fatalf("after step %d (%s): gradient of %s [%d] reads %#x, want %#x", s, step, c.name, i, math.Float32bits(c.got[i]), math.Float32bits(c.want[i]))
						}
					}
				}
			}
		})
	}
}
