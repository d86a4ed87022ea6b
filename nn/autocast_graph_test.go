package nn_test

import (
	"testing"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
)

// Without WithAutocast, Compile leaves the graph the build function made as it is: in
// eval mode (nothing differentiated) Builder.Graph holds exactly the build's nodes after
// Compile, and in both modes the loss and the outputs are the build's own nodes.
func TestCompileWithoutAutocastKeepsTheGraph(t *testing.T) {
	const batch = 8
	m, err := nn.NewGraphModel(gormlp.Fixed(1, batch))
	if err != nil {
		t.Fatal(err)
	}
	for _, train := range []bool{false, true} {
		var built G.Nodes
		var loss *G.Node
		build := func(b *nn.Builder) (*G.Node, error) {
			l, err := gormlp.Fixed(1, batch)(b)
			if err != nil {
				return nil, err
			}
			b.Output("loss", l)
			built, loss = append(G.Nodes(nil), b.Graph.AllNodes()...), l
			return l, nil
		}
		p, err := nn.Compile(m, build, nn.Training(train))
		if err != nil {
			t.Fatal(err)
		}
		if out := p.OutputNode("loss"); p.Loss != loss || out != loss {
			t.Errorf("train=%v: Compile's loss %p and output %p, want the build's loss %p", train, p.Loss, out, loss)
		}
		if !train {
			after := p.Builder.Graph.AllNodes()
			if len(after) != len(built) {
				t.Errorf("eval: %d nodes after Compile, %d after the build", len(after), len(built))
			}
			for i := range min(len(after), len(built)) {
				if after[i] != built[i] {
					t.Errorf("eval: node %d is %v after Compile, %v after the build", i, after[i], built[i])
					break
				}
			}
		}
		p.Close()
	}
}
