package nn

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
)

// zeroNet is smallNet plus a parameter the forward never asks for ("extra": the graph does
// not use it and its gradient never arrives). newZeroNet widens the last layer so that its
// weight (1600 values) takes the copy that bypasses the cache, with a head and a tail.
type zeroNet struct {
	body  *Sequential
	extra *Param
}

func (n *zeroNet) Declare(s *Scope) error {
	n.extra = s.Param("extra", []int{7}, nil)
	return s.Child("body", n.body)
}

func newZeroNet() *zeroNet {
	body := smallNet()
	body.Layers[0].(*Conv2d).Out = 16
	body.Layers[1].(*BatchNorm2d).C = 16
	body.Layers[5] = &Linear{In: 16, Out: 100}
	return &zeroNet{body: body}
}

func (n *zeroNet) Forward(b *Builder, x *G.Node) (*G.Node, error) { return n.body.Forward(b, x) }

func TestRunZeroedLeavesWhatZeroGradThenRunLeave(t *testing.T) {
	ctx := context.Background()
	errHook := errors.New("hook failed")
	for _, tc := range []struct {
		name    string
		ownBuf  bool // WithGradBuffer instead of the model's buffer
		failAt  int  // the gradient hook fails at this arrival (1-based), 0 never
		wantErr bool
	}{
		{name: "model buffer"},
		{name: "own buffer", ownBuf: true},
		{name: "hook fails midway", failAt: 3, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := newZeroNet()
			m, err := NewModel(net, WithSeed(4))
			if err != nil {
				t.Fatal(err)
			}
			buf := m.Params.Grad
			arrivals := 0
			arrived := map[*Param]bool{}
			opts := []BuildOption{WithGradHook(func(prm *Param) error {
				arrived[prm] = true
				if arrivals++; arrivals == tc.failAt {
					return errHook
				}
				return nil
			})}
			if tc.ownBuf {
				buf = make([]float32, len(m.Params.Grad))
				opts = append(opts, WithGradBuffer(buf))
			}
			p, err := Compile(m, classify(3, 6, 5), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			fill(t, p, 5)
			garbage := func() {
				for i := range buf {
					buf[i] = float32(i%13) - 6.5
				}
			}
			run := func(f func(context.Context) error) []float32 {
				arrivals = 0
				clear(arrived)
				if err := f(ctx); (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), errHook.Error()) {
					t.Fatalf("run: %v, want an error: %v", err, tc.wantErr)
				}
				return append([]float32(nil), buf...)
			}
			garbage()
			want := run(func(ctx context.Context) error {
				if err := p.ZeroGrad(); err != nil {
					return err
				}
				return p.Run(ctx)
			})
			garbage()
			got := run(p.RunZeroed)
			if !arrived[net.body.Layers[5].(*Linear).B] || arrived[net.extra] || tc.failAt > 0 && len(arrived) != tc.failAt {
				t.Fatalf("arrived %v: want the last layer's gradients and not extra's, %d of them when a hook fails", arrived, tc.failAt)
			}
			for _, prm := range m.Params.Params {
				if arrived[prm] {
					continue
				}
				for i, g := range buf[prm.Offset : prm.Offset+len(prm.Data)] {
					if g != 0 {
						t.Fatalf("%s[%d] = %g after RunZeroed: its gradient never arrived, want 0", prm.Name, i, g)
					}
				}
			}
			nonzero := 0
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("grad[%d] = %g after RunZeroed, %g after ZeroGrad then Run", i, got[i], want[i])
				}
				if want[i] != 0 {
					nonzero++
				}
			}
			if nonzero == 0 {
				t.Fatal("no gradient arrived: the comparison says nothing")
			}
			if tc.wantErr {
				return
			}
			// Without ZeroGrad, runs add: RunZeroed then Run is twice one run's gradient.
			got = run(p.Run)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]+want[i]) {
					t.Fatalf("grad[%d] = %g after RunZeroed then Run, want 2×%g", i, got[i], want[i])
				}
			}
			// And a Run onto values already there adds to them, whatever they are.
			garbage()
			base := append([]float32(nil), buf...)
			got = run(p.Run)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(base[i]+want[i]) {
					t.Fatalf("grad[%d] = %g after a Run onto %g, want %g", i, got[i], base[i], base[i]+want[i])
				}
			}
		})
	}
}

// ZeroGrad then Run leaves zero the gradients that did not arrive, of the model's buffer and
// of every parameter's view of it.
func TestZeroGradThenRunZeroesWhatDidNotArrive(t *testing.T) {
	net := newZeroNet()
	m, err := NewModel(net, WithSeed(6))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, classify(2, 5, 5))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fill(t, p, 7)
	for i := range m.Params.Grad {
		m.Params.Grad[i] = 1
	}
	m.Params.ZeroGrad()
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, g := range net.extra.Grad {
		if g != 0 {
			t.Fatalf("extra.Grad[%d] = %g: its gradient never arrived, want 0", i, g)
		}
	}
}

// zeroFloats zeroes every element of its slice, and only those, at every size and
// alignment: through Go's clear and through the copy past the cache, with its head and tail.
func TestZeroFloats(t *testing.T) {
	for _, tc := range []struct {
		name   string
		off, n int
	}{
		{"empty", 0, 0},
		{"small", 1, 5},
		{"below the copy", 0, ntClearMin - 1},
		{"copy, unaligned", 1, ntClearMin + 3},
		{"copy, blocks and a tail", 3, 3*len(zeroBlock) + 7},
		{"large", 0, ntClearMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]float32, tc.off+tc.n+2)
			for i := range buf {
				buf[i] = float32(i%5) + 1
			}
			zeroFloats(buf[tc.off : tc.off+tc.n])
			for i, v := range buf {
				inside := i >= tc.off && i < tc.off+tc.n
				if inside && v != 0 || !inside && v != float32(i%5)+1 {
					t.Fatalf("buf[%d] = %g after zeroing [%d, %d)", i, v, tc.off, tc.off+tc.n)
				}
			}
		})
	}
}

// plusZero writes what adding src into zeros writes, bit for bit: -0 becomes +0 and a
// signalling NaN is quieted, as the add does, at every length and in every lane.
func TestPlusZeroIsAddIntoZeros(t *testing.T) {
	negZero := math.Float32frombits(1 << 31)
	sNaN := math.Float32frombits(0x7f800001)
	for _, n := range []int{0, 5, 8, 67, 3*len(zeroBlock) + 5} {
		src := make([]float32, n)
		for i := range src {
			switch i % 6 {
			case 0:
				src[i] = negZero
			case 1:
				src[i] = float32(i) - 0.5
			case 2:
				src[i] = sNaN
			case 3:
				src[i] = float32(math.Inf(-1))
			case 4:
				src[i] = -float32(i) * 1e-38 // subnormal and small
			}
		}
		want := make([]float32, n)
		simd.AddTo(want, src)
		for off := range 3 { // dst's alignment: the head before the 16-byte boundary
			got := make([]float32, n+off)[off:]
			for i := range got {
				got[i] = 7
			}
			simd.PlusZeroNT(got, src)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d, dst at +%d: [%d] = %#x, adding %#x into zeros gives %#x", n, off, i, math.Float32bits(got[i]), math.Float32bits(src[i]), math.Float32bits(want[i]))
				}
			}
			if n > 0 && math.Float32bits(got[0]) != 0 {
				t.Fatalf("n=%d: -0 + 0 gave %#x, want +0", n, math.Float32bits(got[0]))
			}
		}
	}
}
