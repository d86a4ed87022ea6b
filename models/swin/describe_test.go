package swin

import (
	"maps"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Every op of this package, forward and backward, describes itself through ops.Describe
// (the device executor's only view of it): the kind, an output shape equal to the node's,
// a single input's shape equal to that input's, and a backward naming its forward.
func TestOpsDescribeThemselves(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float64, 4, G.WithShape(2, 3, 2, 2), G.WithName("x"), G.WithInit(G.Gaussian(0, 1)))
	table := G.NewMatrix(g, tensor.Float64, G.WithShape(9, 2), G.WithName("table"), G.WithInit(G.Gaussian(0, 1)))
	mask := make([]float32, 2*16)
	nhwc, err := toNHWC(x) // [2, 2, 2, 3]
	if err != nil {
		t.Fatal(err)
	}
	// Rows of 3 channels gathered into [2, 4, 3], one padded row.
	rows, err := gatherRows(nhwc, []int32{0, 1, 2, 3, 4, -1, 6, 7}, 3, tensor.Shape{2, 4, 3})
	if err != nil {
		t.Fatal(err)
	}
	w := G.NewMatrix(g, tensor.Float64, G.WithShape(3, 6), G.WithName("w"), G.WithInit(G.Gaussian(0, 1)))
	qkv, err := G.Mul(G.Must(G.Reshape(rows, tensor.Shape{8, 3})), w)
	if err != nil {
		t.Fatal(err)
	}
	qkv, err = G.Reshape(G.Must(G.Concat(1, qkv, qkv, qkv)), tensor.Shape{2, 4, 18})
	if err != nil {
		t.Fatal(err)
	}
	y, err := windowAttention(qkv, table, windowAttn{heads: 2, n: 4, c: 6, relIdx: relativePositionIndex(2), nW: 2, mask: mask})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(G.Must(G.Sum(y)), x, table); err != nil {
		t.Fatal(err)
	}

	want := map[ops.Kind]int{
		ops.KindPermute: 2, ops.KindGatherRows: 1, ops.KindScatterAddRows: 1,
		ops.KindWindowAttention: 1, ops.KindWindowAttentionGrad: 1, ops.KindWindowAttentionTableGrad: 1,
	}
	got := map[ops.Kind]int{}
	var attn G.Op
	for _, n := range g.AllNodes() {
		if n.Op() == nil {
			continue
		}
		if _, own := n.Op().(ops.Describer); !own {
			continue
		}
		d, ok := ops.Describe(n.Op())
		if !ok {
			t.Fatalf("%s: ops.Describe does not describe an ops.Describer", n.Name())
		}
		got[d.Kind]++
		if !slices.Equal(d.Out, []int(n.Shape())) {
			t.Errorf("%s (kind %d): described output %v, node %v", n.Name(), d.Kind, d.Out, n.Shape())
		}
		if in := g.From(n.ID()); in.Len() == 1 && in.Next() {
			if s := in.Node().(*G.Node).Shape(); !slices.Equal(d.In, []int(s)) {
				t.Errorf("%s (kind %d): described input %v, input node %v", n.Name(), d.Kind, d.In, s)
			}
		}
		switch d.Kind {
		case ops.KindWindowAttention:
			attn = n.Op()
			if a := d.Attention; a == nil || a.Bw != 2 || a.N != 4 || a.C != 6 || a.Heads != 2 || a.TableRows != 9 || a.NW != 2 || len(a.RelIndex) != 16 || len(a.Mask) != 32 {
				t.Errorf("attention described as %+v", d.Attention)
			}
		case ops.KindPermute:
			if len(d.In) != len(d.Perm) {
				t.Fatalf("permute of %v by %v", d.In, d.Perm)
			}
			for i, a := range d.Perm {
				if d.Out[i] != d.In[a] {
					t.Errorf("permute of %v by %v does not give %v", d.In, d.Perm, d.Out)
				}
			}
		case ops.KindGatherRows, ops.KindScatterAddRows:
			if d.Row != 3 || len(d.Index) != 8 {
				t.Errorf("gather described with rows of %d, %d indices; want 3, 8", d.Row, len(d.Index))
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("described kinds %v, want %v", got, want)
	}
	for _, n := range g.AllNodes() {
		if d, ok := ops.Describe(n.Op()); ok && (d.Kind == ops.KindWindowAttentionGrad || d.Kind == ops.KindWindowAttentionTableGrad) && d.Fwd != attn {
			t.Errorf("%s: forward %v, want the attention op %v", n.Name(), d.Fwd, attn)
		}
	}
}
