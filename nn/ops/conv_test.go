package ops

import (
	"fmt"
	"math/rand"
	"runtime"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type convCase struct {
	name string
	x, w []int
	bias bool
	o    ConvOpts
}

var convCases = []convCase{
	{name: "3x3 p1", x: []int{2, 3, 5, 7}, w: []int{4, 3, 3, 3}, bias: true, o: ConvOpts{Padding: [2]int{1, 1}}},
	{name: "3x3 s2 p1 batch1 odd", x: []int{1, 3, 7, 6}, w: []int{5, 3, 3, 3}, bias: true, o: ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}},
	{name: "dil2 p2 nobias", x: []int{2, 2, 9, 8}, w: []int{3, 2, 3, 3}, o: ConvOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}}},
	{name: "groups2", x: []int{2, 4, 6, 5}, w: []int{6, 2, 3, 3}, bias: true, o: ConvOpts{Stride: [2]int{1, 2}, Padding: [2]int{1, 0}, Groups: 2}},
	{name: "1x1 direct", x: []int{2, 6, 4, 5}, w: []int{3, 6, 1, 1}, bias: true},
	{name: "1x1 direct groups2", x: []int{2, 4, 3, 3}, w: []int{6, 2, 1, 1}, o: ConvOpts{Groups: 2}},
	{name: "1x1 s2", x: []int{2, 4, 5, 5}, w: []int{3, 4, 1, 1}, o: ConvOpts{Stride: [2]int{2, 2}}},
	{name: "7x7 s2 p3", x: []int{1, 3, 11, 9}, w: []int{4, 3, 7, 7}, o: ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{3, 3}}},
	{name: "rect kernel mixed", x: []int{2, 3, 8, 7}, w: []int{2, 3, 2, 3}, bias: true, o: ConvOpts{Stride: [2]int{2, 1}, Padding: [2]int{0, 2}, Dilation: [2]int{1, 2}}},
	{name: "kernel larger than stride gaps", x: []int{1, 2, 5, 5}, w: []int{2, 2, 2, 2}, o: ConvOpts{Stride: [2]int{3, 3}, Padding: [2]int{1, 1}}},
}

func (c convCase) build(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
	x := cvIn(g, dt, rng, "x", c.x...)
	w := cvIn(g, dt, rng, "w", c.w...)
	in := G.Nodes{x, w}
	var b *G.Node
	if c.bias {
		b = cvIn(g, dt, rng, "b", c.w[0])
		in = append(in, b)
	}
	y, err := Conv2d(x, w, b, c.o)
	return in, y, err
}

func TestConv2dGradcheck(t *testing.T) {
	for _, c := range convCases {
		t.Run(c.name, func(t *testing.T) { cvCheck(t, c.build, cvLinearEps) })
	}
}

// TestConv2dMatchesNaive compares the forward with a direct six-loop convolution.
func TestConv2dMatchesNaive(t *testing.T) {
	for _, c := range convCases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(3))
			g := G.NewGraph()
			in, y, err := c.build(g, tensor.Float64, rng)
			if err != nil {
				t.Fatal(err)
			}
			m := G.NewTapeMachine(g)
			defer m.Close()
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			var b []float64
			if c.bias {
				b = in[2].Value().Data().([]float64)
			}
			want := naiveConv(in[0].Value().Data().([]float64), in[1].Value().Data().([]float64), b, c.x, c.w, c.o, y.Shape())
			if r := gradcheck.RelNorm(cvF64s(y.Value()), want); r > 1e-13 {
				t.Errorf("rel err vs naive %.3g", r)
			}
		})
	}
}

func naiveConv(x, w, b []float64, xs, ws []int, o ConvOpts, ys tensor.Shape) []float64 {
	one := func(v int) int { return max(v, 1) }
	sh, sw, dh, dw, gr := one(o.Stride[0]), one(o.Stride[1]), one(o.Dilation[0]), one(o.Dilation[1]), one(o.Groups)
	N, C, H, W := xs[0], xs[1], xs[2], xs[3]
	O, Cg, KH, KW := ws[0], ws[1], ws[2], ws[3]
	OH, OW := ys[2], ys[3]
	y := make([]float64, N*O*OH*OW)
	for n := 0; n < N; n++ {
		for oc := 0; oc < O; oc++ {
			g := oc / (O / gr)
			for oh := 0; oh < OH; oh++ {
				for ow := 0; ow < OW; ow++ {
					s := 0.0
					if b != nil {
						s = b[oc]
					}
					for ci := 0; ci < Cg; ci++ {
						c := g*Cg + ci
						for i := 0; i < KH; i++ {
							for j := 0; j < KW; j++ {
								ih, iw := oh*sh-o.Padding[0]+i*dh, ow*sw-o.Padding[1]+j*dw
								if ih >= 0 && ih < H && iw >= 0 && iw < W {
									s += x[((n*C+c)*H+ih)*W+iw] * w[((oc*Cg+ci)*KH+i)*KW+j]
								}
							}
						}
					}
					y[((n*O+oc)*OH+oh)*OW+ow] = s
				}
			}
		}
	}
	return y
}

func TestConv2dPyTorchFixtures(t *testing.T) {
	f := openCvFixtures(t)
	cases := f.cases("conv_")
	if len(cases) < 8 {
		t.Fatalf("found %d conv fixtures, want 8", len(cases))
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			o := f.ints(t, c+"__opts")
			opts := ConvOpts{Stride: [2]int{o[0], o[1]}, Padding: [2]int{o[2], o[3]}, Dilation: [2]int{o[4], o[5]}, Groups: o[6]}
			names := []string{"x", "w"}
			if o[7] == 1 {
				names = append(names, "b")
			}
			cvCompareFixture(t, f, c, names, func(in G.Nodes) (*G.Node, error) {
				var b *G.Node
				if len(in) == 3 {
					b = in[2]
				}
				return Conv2d(in[0], in[1], b, opts)
			})
		})
	}
}

func TestConv2dBadInput(t *testing.T) {
	g := G.NewGraph()
	node := func(name string, shape ...int) *G.Node {
		return G.NewTensor(g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name))
	}
	x := node("x", 2, 3, 5, 5)
	_, err := Conv2d(x, node("w1", 4, 2, 3, 3), nil, ConvOpts{})
	cvWantErr(t, err, "ops.Conv2d", "(2, 3, 5, 5)", "(4, 2, 3, 3)", "channels")
	_, err = Conv2d(node("x3", 3, 5, 5), node("w2", 4, 3, 3, 3), nil, ConvOpts{})
	cvWantErr(t, err, "ops.Conv2d", "(3, 5, 5)", "rank 4")
	_, err = Conv2d(x, node("w3", 4, 3, 3, 3), node("b", 5), ConvOpts{})
	cvWantErr(t, err, "ops.Conv2d", "bias", "(5)")
	_, err = Conv2d(x, node("w4", 4, 3, 7, 7), nil, ConvOpts{})
	cvWantErr(t, err, "ops.Conv2d", "empty")
	_, err = Conv2d(x, node("w5", 3, 1, 3, 3), nil, ConvOpts{Groups: 2})
	cvWantErr(t, err, "ops.Conv2d", "divisible")
	x64 := G.NewTensor(g, tensor.Float64, 4, G.WithShape(2, 3, 5, 5), G.WithName("x64"))
	_, err = Conv2d(x64, node("w6", 4, 3, 3, 3), nil, ConvOpts{})
	cvWantErr(t, err, "ops.Conv2d", "float64")
}

// TestConv2dRunTwice builds the same network twice and runs each machine several times:
// every run must give identical values, so reused buffers (the op's output, the im2col
// columns shared by forward and backward, the machine's registers) corrupt nothing.
func TestConv2dRunTwice(t *testing.T) {
	build := func() (*G.ExprGraph, G.Nodes) {
		rng := rand.New(rand.NewSource(5))
		g := G.NewGraph()
		dt := tensor.Float32
		x := cvIn(g, dt, rng, "x", 2, 3, 12, 11)
		w1 := cvIn(g, dt, rng, "w1", 8, 3, 3, 3)
		b1 := cvIn(g, dt, rng, "b1", 8)
		w2 := cvIn(g, dt, rng, "w2", 8, 8, 1, 1)
		w3 := cvIn(g, dt, rng, "w3", 8, 4, 3, 3)
		fw := cvIn(g, dt, rng, "fw", 5, 8)
		fb := cvIn(g, dt, rng, "fb", 5)
		h := cvMust(Conv2d(x, w1, b1, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}))
		h = cvMust(MaxPool2d(h, [2]int{3, 3}, [2]int{1, 1}, [2]int{1, 1}))
		h2 := cvMust(Conv2d(h, w2, nil, ConvOpts{}))
		h = cvMust(G.Add(h, h2))
		h = cvMust(Conv2d(h, w3, nil, ConvOpts{Padding: [2]int{2, 2}, Dilation: [2]int{2, 2}, Groups: 2}))
		h = cvMust(Flatten(cvMust(AdaptiveAvgPool2d1(h))))
		h = cvMust(Linear(h, fw, fb))
		cost := cvMust(G.Sum(cvMust(G.Square(h))))
		params := G.Nodes{x, w1, b1, w2, w3, fw, fb}
		grads, err := G.Grad(cost, params...)
		if err != nil {
			t.Fatal(err)
		}
		return g, append(G.Nodes{cost, h}, grads...)
	}
	var ref [][]float64
	for round := 0; round < 2; round++ {
		g, outs := build()
		m := G.NewTapeMachine(g)
		for run := 0; run < 3; run++ {
			if err := m.RunAll(); err != nil {
				t.Fatal(err)
			}
			got := cvValues(outs)
			if ref == nil {
				ref = got
			} else {
				for i := range ref {
					if !slices.Equal(ref[i], got[i]) {
						t.Errorf("graph %d run %d: output %d (%v) differs from the first run", round, run, i, outs[i].Name())
					}
				}
			}
			m.Reset()
		}
		m.Close()
	}
}

func ExampleConv2d() {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(8, 3, 32, 32), G.WithName("x"), G.WithInit(G.Zeroes()))
	w := G.NewTensor(g, tensor.Float32, 4, G.WithShape(16, 3, 3, 3), G.WithName("w"), G.WithInit(G.Zeroes()))
	y, err := Conv2d(x, w, nil, ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}})
	fmt.Println(y.Shape(), err)
	// Output: (8, 16, 16, 16) <nil>
}

// TestConv2dNoBufferAllocs: after the first run, forward and backward reuse the op's output
// tensors and im2col columns; what is left per call is a few interface headers (tensor's
// Data() boxes a slice), far below the buffer sizes (32 to 72 KiB here). gonum's pure-Go
// GEMM (CGO_ENABLED=0) allocates its own goroutine work queue, about 12 KiB per call at two
// Ps and more with more Ps (one worker per P; 17-19 KiB at eight), as does the ops' intra-op
// split, so the measurement runs at GOMAXPROCS 2 whatever the machine's core count: the
// bound is about our buffers, not the machine's width. The 3x3 runs once as an implicit
// convolution (where the C kernels run) and once through the GEMM path.
func TestConv2dNoBufferAllocs(t *testing.T) {
	for _, path := range []string{"implicit", "GEMM path"} {
		t.Run(path, func(t *testing.T) {
			if path == "GEMM path" {
				gemmPathOnly(t)
			}
			convNoBufferAllocs(t)
		})
	}
}

func convNoBufferAllocs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	rng := rand.New(rand.NewSource(1))
	g := G.NewGraph()
	x := cvIn(g, tensor.Float32, rng, "x", 4, 8, 16, 16)
	w := cvIn(g, tensor.Float32, rng, "w", 8, 8, 3, 3)
	b := cvIn(g, tensor.Float32, rng, "b", 8)
	y := cvMust(Conv2d(x, w, b, ConvOpts{Padding: [2]int{1, 1}}))
	p := cvMust(MaxPool2d(y, [2]int{2, 2}, [2]int{2, 2}, [2]int{}))
	grads, err := G.Grad(cvMust(G.Sum(p)), x, w, b)
	if err != nil {
		t.Fatal(err)
	}
	dy := gradcheck.Rand(rng, tensor.Float32, y.Shape()...)
	dp := gradcheck.Rand(rng, tensor.Float32, p.Shape()...)
	xv, wv, bv := x.Value(), w.Value(), b.Value()
	step := func() {
		for _, r := range []struct {
			op G.Op
			in []G.Value
		}{
			{y.Op(), []G.Value{xv, wv, bv}}, {grads[0].Op(), []G.Value{wv, dy}},
			{grads[1].Op(), []G.Value{xv, dy}}, {grads[2].Op(), []G.Value{dy}},
			{p.Op(), []G.Value{dy}}, {y.Deriv().Op(), []G.Value{dy, dp}},
		} {
			if _, err := r.op.Do(r.in...); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const runs = 10
	for range runs {
		step()
	}
	runtime.ReadMemStats(&m1)
	bound := uint64(4 << 10)
	if blasimpl.Name() == "gonum" {
		bound = 16 << 10
	}
	if perCall := (m1.TotalAlloc - m0.TotalAlloc) / runs; perCall > bound {
		t.Errorf("forward+backward allocates %d bytes per call with %s, want < %d (buffers must be reused)", perCall, blasimpl.Name(), bound)
	} else {
		t.Logf("%d bytes allocated per forward+backward", perCall)
	}
}
