package nn

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
)

// smallNet is conv -> BN -> ReLU -> global pool -> flatten -> linear.
func smallNet() *Sequential {
	return &Sequential{
		Names: []string{"conv", "bn", "relu", "pool", "flat", "fc"},
		Layers: []Module{
			&Conv2d{In: 3, Out: 4, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
			&BatchNorm2d{C: 4},
			&ReLU{},
			&AdaptiveAvgPool2d{},
			&Flatten{},
			&Linear{In: 4, Out: 5},
		},
	}
}

func classify(batch, h, w int) BuildFunc { return Classify(batch, []int{3, h, w}, 0) }

func fill(t *testing.T, p *Program, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	x, err := p.Input("images")
	if err != nil {
		t.Fatal(err)
	}
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y, err := p.Input("labels")
	if err != nil {
		t.Fatal(err)
	}
	for i := range y {
		y[i] = float32(rng.Intn(5))
	}
}

func TestParamSetLayoutIsReverseRegistration(t *testing.T) {
	m, err := NewModel(smallNet(), WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"conv.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"}
	ps := m.Params
	if len(ps.Params) != len(names) {
		t.Fatalf("got %d params, want %d", len(ps.Params), len(names))
	}
	for i, n := range names {
		if ps.Params[i].Name != n {
			t.Fatalf("param %d is %q, want %q", i, ps.Params[i].Name, n)
		}
	}
	if ps.Param("fc.bias").Offset != 0 || ps.Param("conv.weight").Offset+108 != ps.NumParams() {
		t.Fatalf("layout is not reverse registration: fc.bias at %d, conv.weight at %d of %d",
			ps.Param("fc.bias").Offset, ps.Param("conv.weight").Offset, ps.NumParams())
	}
	ps.Data[ps.Param("fc.weight").Offset] = 42
	if ps.Param("fc.weight").Data[0] != 42 {
		t.Fatal("parameter data does not alias the flat buffer")
	}
	for _, b := range []string{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"} {
		if ps.Buffer(b) == nil {
			t.Fatalf("buffer %s missing", b)
		}
	}
	if ps.Buffer("bn.running_var").Data[0] != 1 {
		t.Fatal("running_var must start at 1")
	}
}

// Gradients arrive through the taps in backward order, accumulate like PyTorch's .grad, and
// running statistics survive compiling new programs.
func TestProgramGradientsAndBuffers(t *testing.T) {
	m, err := NewModel(smallNet(), WithSeed(2))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	p, err := Compile(m, classify(3, 6, 5), WithGradHook(func(p *Param) error {
		order = append(order, p.Name)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p, 3)
	ctx := context.Background()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if len(order) != 5 || order[0] != "fc.bias" && order[0] != "fc.weight" || order[4] != "conv.weight" {
		t.Fatalf("gradient order %v: want fc first and conv.weight last", order)
	}
	if u := p.Unreached(); len(u) != 0 {
		t.Fatalf("unreached %v", u)
	}
	first := append([]float32(nil), m.Params.Grad...)
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for i, g := range m.Params.Grad {
		if math.Abs(float64(g-2*first[i])) > 1e-5*math.Abs(float64(g))+1e-7 {
			t.Fatalf("grad[%d] = %g after two runs, want 2×%g", i, g, first[i])
		}
	}
	if n := m.Params.Buffer("bn.num_batches_tracked").Int64[0]; n != 2 {
		t.Fatalf("num_batches_tracked = %d, want 2", n)
	}
	mean := append([]float32(nil), m.Params.Buffer("bn.running_mean").Data...)
	ev, err := Compile(m, classify(3, 6, 5), Training(false))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ev, 3)
	if err := ev.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range m.Params.Buffer("bn.running_mean").Data {
		if v != mean[i] {
			t.Fatalf("running_mean changed by building/running an eval program: %v -> %v", mean, m.Params.Buffer("bn.running_mean").Data)
		}
	}
}

// Training with a plain SGD loop on one fixed batch drives the loss down.
func TestProgramTrains(t *testing.T) {
	net := smallNet()
	net.Layers[0] = &Conv2d{In: 3, Out: 16, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}}
	net.Layers[1] = &BatchNorm2d{C: 16}
	net.Layers[5] = &Linear{In: 16, Out: 5}
	m, err := NewModel(net, WithSeed(4))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(m, classify(8, 5, 5))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p, 5)
	var first, last float32
	for step := 0; step < 100; step++ {
		m.Params.ZeroGrad()
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		l, _ := p.LossValue()
		if step == 0 {
			first = l
		}
		last = l
		for i, g := range m.Params.Grad {
			m.Params.Data[i] -= 0.5 * g
		}
	}
	if !(last < 0.5*first) {
		t.Fatalf("loss %g -> %g: did not halve", first, last)
	}
}

func TestWrongInputShapeNamesLayer(t *testing.T) {
	m, err := NewModel(smallNet())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(m, func(b *Builder) (*G.Node, error) {
		x, _ := b.Input("images", 2, 4, 5, 5) // 4 channels, conv wants 3
		return b.Forward(x)
	}, Training(false))
	if err == nil || !strings.Contains(err.Error(), "conv") {
		t.Fatalf("want an error naming layer conv, got %v", err)
	}
}

// WithParamBacking binds the leaves elsewhere; WithGradSink receives gradients instead of
// the gradient buffer.
func TestParamBackingAndGradSink(t *testing.T) {
	m, err := NewModel(smallNet(), WithSeed(2))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Compile(m, classify(3, 6, 5))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ref, 3)
	if err := ref.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), m.Params.Grad...)
	m.Params.ZeroGrad()

	copies := map[*Param][]float32{}
	sunk := map[string][]float32{}
	p, err := Compile(m, classify(3, 6, 5),
		WithParamBacking(func(p *Param) []float32 {
			c := append([]float32(nil), p.Data...)
			copies[p] = c
			return c
		}),
		WithGradSink(func(p *Param, g []float32) error {
			sunk[p.Name] = append([]float32(nil), g...)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	fill(t, p, 3)
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, g := range m.Params.Grad {
		if g != 0 {
			t.Fatal("the gradient buffer was written despite the sink")
		}
	}
	for _, prm := range m.Params.Params {
		got := sunk[prm.Name]
		for i, g := range got {
			if g != want[prm.Offset+i] {
				t.Fatalf("%s[%d]: sunk %g, buffer run %g", prm.Name, i, g, want[prm.Offset+i])
			}
		}
		if len(got) != len(prm.Data) {
			t.Fatalf("%s: %d gradient values sunk", prm.Name, len(got))
		}
	}
	// The leaves read the backing: changing it changes the output.
	out1, _ := p.Output("logits")
	o1 := append([]float32(nil), out1...)
	for _, c := range copies {
		for i := range c {
			c[i] *= 2
		}
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	out2, _ := p.Output("logits")
	if out2[0] == o1[0] {
		t.Fatal("the program did not read the parameter backing")
	}
}
