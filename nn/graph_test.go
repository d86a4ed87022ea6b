package nn_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plain gorgonia program compiled as a graph model and stepped by a gorgonia solver
// through Program.Step is the same program: after 50 steps its weights equal, bit for bit,
// those of the stand-alone program (own TapeMachine with dual values, solver.Step), for
// every solver.
func TestGraphModelIsThePlainProgram(t *testing.T) {
	const batch, steps = 8, 50
	ctx := context.Background()
	for _, sv := range gormlp.Solvers {
		t.Run(sv.Name, func(t *testing.T) {
			plain, err := gormlp.NewPlain(1, batch)
			if err != nil {
				t.Fatal(err)
			}
			m, err := nn.NewGraphModel(gormlp.Fixed(1, batch))
			if err != nil {
				t.Fatal(err)
			}
			prog, err := nn.Compile(m, gormlp.Fixed(1, batch), nn.WithSolver(sv.New()))
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			ls := prog.Learnables()
			if len(ls) != 2 || ls[0].Name() != "w1" || ls[1].Name() != "w2" {
				t.Fatalf("learnables %v, want w1 and w2", ls)
			}
			x, y := make([]float32, batch*gormlp.In), make([]float32, batch)
			s := sv.New()
			for step := range steps {
				want, err := plain.Step(s, step*batch)
				if err != nil {
					t.Fatal(err)
				}
				gormlp.Data(x, y, step*batch, batch)
				if err := prog.SetInput("x", x); err != nil {
					t.Fatal(err)
				}
				if err := prog.SetInput("y", y); err != nil {
					t.Fatal(err)
				}
				if err := prog.Run(ctx); err != nil {
					t.Fatal(err)
				}
				got, _ := prog.LossValue()
				if got != want {
					t.Fatalf("step %d: loss %v, plain program %v", step, got, want)
				}
				if err := prog.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			a, b := gormlp.Weights(plain.W1, plain.W2), gormlp.Weights(ls[0], ls[1])
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("weight %d: %v, plain program %v", i, b[i], a[i])
				}
			}
			if !equal(m.Params.Data, concat(m, b)) {
				t.Fatal("the learnables' values are not the model's parameters")
			}
		})
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// concat lays w (w1 then w2) out in the model's flat order (reverse registration).
func concat(m *nn.Model, w []float32) []float32 {
	out := make([]float32, len(w))
	off := 0
	for _, p := range m.Params.Params {
		copy(out[p.Offset:p.Offset+len(p.Data)], w[off:off+len(p.Data)])
		off += len(p.Data)
	}
	return out
}

// After a Run, Node.Grad() of each learnable is the program's gradient buffer itself, and a
// solver's zeroing clears it.
func TestLearnablesGradAliasesBuffer(t *testing.T) {
	m, err := nn.NewGraphModel(gormlp.Fixed(1, 4))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := nn.Compile(m, gormlp.Fixed(1, 4), nn.WithSolver(G.NewVanillaSolver(G.WithLearnRate(0.1))))
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float32, 4*gormlp.In), make([]float32, 4)
	gormlp.Data(x, y, 0, 4)
	_ = prog.SetInput("x", x)
	_ = prog.SetInput("y", y)
	if err := prog.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range prog.Learnables() {
		g, err := w.Grad()
		if err != nil {
			t.Fatal(err)
		}
		p := m.Params.Param(w.Name())
		gd := g.Data().([]float32)
		if &gd[0] != &p.Grad[0] || len(gd) != len(p.Grad) {
			t.Fatalf("%s: Node.Grad() is not the model's gradient buffer", w.Name())
		}
		if allZero(p.Grad) {
			t.Fatalf("%s: zero gradient", w.Name())
		}
	}
	if err := G.NewVanillaSolver(G.WithLearnRate(0.1)).Step(G.NodesToValueGrads(prog.Learnables())); err != nil {
		t.Fatal(err)
	}
	if !allZero(m.Params.Grad) {
		t.Fatal("the solver's zeroing did not clear the model's gradient")
	}
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

func TestGraphModelBadInput(t *testing.T) {
	good := gormlp.Fixed(1, 4)
	m, err := nn.NewGraphModel(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		build nn.BuildFunc
		want  string
	}{
		{"other shape", func(b *nn.Builder) (*G.Node, error) {
			w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(3, 16), G.WithName("w1"), G.WithInit(G.Zeroes()))
			return b.Learnable(w)
		}, "learnable 0 is w1 (3, 16), but the model's parameter 0 is w1 [4 16]"},
		{"one too many", func(b *nn.Builder) (*G.Node, error) {
			if _, err := good(b); err != nil {
				return nil, err
			}
			w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(2, 2), G.WithName("extra"), G.WithInit(G.Zeroes()))
			return b.Learnable(w)
		}, "learnable extra (2, 2) is the 3-th of this graph, but the model has 2 parameters"},
		{"computed node", func(b *nn.Builder) (*G.Node, error) {
			w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(4, 16), G.WithName("w1"), G.WithInit(G.Zeroes()))
			return b.Learnable(G.Must(G.Neg(w)))
		}, "is computed by"},
		{"float64", func(b *nn.Builder) (*G.Node, error) {
			w := G.NewMatrix(b.Graph, tensor.Float64, G.WithShape(4, 16), G.WithName("w1"), G.WithInit(G.Zeroes()))
			return b.Learnable(w)
		}, "learnable w1 is float64, want float32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nn.Compile(m, tc.build)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) {
		w1 := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(2, 2), G.WithName("w"), G.WithInit(G.Zeroes()))
		w2 := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(2, 3), G.WithName("w"), G.WithInit(G.Zeroes()))
		if _, err := b.Learnable(w1); err != nil {
			return nil, err
		}
		return b.Learnable(w2)
	}); err == nil || !strings.Contains(err.Error(), "two learnables are named w") {
		t.Fatalf("duplicate names: error %v", err)
	}
}

// A forward that reads a learnable itself, not the node Learnable returned, is refused at
// Compile: its gradient would bypass the tap, so DDP would never reduce it.
func TestLearnableReadDirectly(t *testing.T) {
	build := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", 4, 4)
		if err != nil {
			return nil, err
		}
		w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(4, 1), G.WithName("w"), G.WithInit(G.Zeroes()))
		if _, err := b.Learnable(w); err != nil {
			return nil, err
		}
		return G.Sum(G.Must(G.Mul(x, w)))
	}
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nn.Compile(m, build)
	if err == nil || !strings.Contains(err.Error(), "learnable w is read directly by") {
		t.Fatalf("error %v, want one naming w", err)
	}
}

// A graph model compiles for evaluation too (nn.Training(false): no taps, so the forward
// reads the learnables themselves), and computes the loss the training program computes on
// the same weights and batch.
func TestGraphModelEval(t *testing.T) {
	const batch = 8
	ctx := context.Background()
	m, err := nn.NewGraphModel(gormlp.Fixed(1, batch))
	if err != nil {
		t.Fatal(err)
	}
	train, err := nn.Compile(m, gormlp.Fixed(1, batch))
	if err != nil {
		t.Fatal(err)
	}
	defer train.Close()
	eval, err := nn.Compile(m, gormlp.Fixed(1, batch), nn.Training(false))
	if err != nil {
		t.Fatalf("compiling the graph model for evaluation: %v", err)
	}
	defer eval.Close()
	x, y := make([]float32, batch*gormlp.In), make([]float32, batch)
	gormlp.Data(x, y, 3*batch, batch)
	var loss [2]float32
	for i, p := range []*nn.Program{train, eval} {
		if err := p.SetInput("x", x); err != nil {
			t.Fatal(err)
		}
		if err := p.SetInput("y", y); err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if loss[i], err = p.LossValue(); err != nil {
			t.Fatal(err)
		}
	}
	if loss[0] != loss[1] || loss[0] == 0 {
		t.Fatalf("eval loss %v, training program's %v", loss[1], loss[0])
	}
}
