package nn_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// An output that a later op of the graph consumes in place (gorgonia's G.Sub and G.Add
// overwrite a dying input) still reads what the forward computed: Output gives x·w, not the
// residual that overwrote its memory. Each case names the output, then builds the loss from
// it through an op gorgonia may run in place; the want is computed here from the same inputs.
func TestOutputSurvivesInPlaceConsumers(t *testing.T) {
	const n = 4
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	y := []float32{10, 20, 30, 40}
	for _, tc := range []struct {
		name string
		sign float32 // the loss is the mean of (pred + sign·y)²
		loss func(pred, y *G.Node) (*G.Node, error)
	}{
		{"(pred-y)²", -1, func(pred, y *G.Node) (*G.Node, error) {
			d, err := G.Sub(pred, y)
			if err != nil {
				return nil, err
			}
			return G.Mean(G.Must(G.Square(d)))
		}},
		{"(pred+y)² through a reshape view", 1, func(pred, y *G.Node) (*G.Node, error) {
			r, err := G.Reshape(pred, tensor.Shape{n})
			if err != nil {
				return nil, err
			}
			d, err := G.Add(r, y)
			if err != nil {
				return nil, err
			}
			return G.Mean(G.Must(G.Square(d)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func(b *nn.Builder) (*G.Node, error) {
				xs, err := b.Input("x", n, 2)
				if err != nil {
					return nil, err
				}
				ys, err := b.Input("y", n)
				if err != nil {
					return nil, err
				}
				w := G.NewVector(b.Graph, tensor.Float32, G.WithShape(2), G.WithName("w"),
					G.WithValue(tensor.New(tensor.WithBacking([]float32{0.5, -1}))))
				if w, err = b.Learnable(w); err != nil {
					return nil, err
				}
				pred, err := G.Mul(xs, w)
				if err != nil {
					return nil, err
				}
				b.Output("pred", pred)
				return tc.loss(pred, ys)
			}
			m, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			p, err := nn.Compile(m, build)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := p.SetInput("x", x); err != nil {
				t.Fatal(err)
			}
			if err := p.SetInput("y", y); err != nil {
				t.Fatal(err)
			}
			if err := p.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, err := p.Output("pred")
			if err != nil {
				t.Fatal(err)
			}
			var sum float32
			for i := range n {
				want := x[2*i]*0.5 - x[2*i+1]
				if got[i] != want {
					t.Fatalf("pred[%d] = %v after Run, want x·w = %v (all: %v)", i, got[i], want, fmt.Sprint(got))
				}
				d := want + tc.sign*y[i]
				sum += d * d
			}
			loss, err := p.LossValue()
			if err != nil {
				t.Fatal(err)
			}
			if want := sum / n; loss != want {
				t.Errorf("loss %v, want %v", loss, want)
			}
		})
	}
}
