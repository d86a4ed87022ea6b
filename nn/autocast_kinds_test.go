package nn

import (
	"reflect"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Which ops Compile's autocast casts: gorgonia's products in every form G.Mul, G.BatchedMatMul,
// G.Tensordot and G.Conv2d build (transposed operands included), nn's Linear and Conv2d ops;
// not G.OuterProd (torch.outer is on no list) nor an elementwise product.
func TestAutocastRecognisesLowerPrecisionOps(t *testing.T) {
	k, err := gorgoniaKinds()
	if err != nil {
		t.Fatal(err)
	}
	g := G.NewGraph()
	mat := func(r, c int) *G.Node { return G.NewMatrix(g, tensor.Float32, G.WithShape(r, c)) }
	vec := func(n int) *G.Node { return G.NewVector(g, tensor.Float32, G.WithShape(n)) }
	t3 := func(a, b, c int) *G.Node { return G.NewTensor(g, tensor.Float32, 3, G.WithShape(a, b, c)) }
	t4 := func(a, b, c, d int) *G.Node { return G.NewTensor(g, tensor.Float32, 4, G.WithShape(a, b, c, d)) }
	// conv2dProduct is the product G.Conv2d builds under its reshape and transpose.
	conv2dProduct := func() (*G.Node, error) {
		y, err := G.Conv2d(t4(1, 2, 4, 4), t4(3, 2, 3, 3), tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})
		if err != nil {
			return nil, err
		}
		for y.Op() != nil && k.shapes[reflect.TypeOf(y.Op())] {
			y = inputsOf(g, y)[0]
		}
		return y, nil
	}
	for _, c := range []struct {
		name string
		node func() (*G.Node, error)
		want bool
	}{
		{"G.Mul matrix matrix", func() (*G.Node, error) { return G.Mul(mat(2, 3), mat(3, 4)) }, true},
		{"G.Mul matrix vector", func() (*G.Node, error) { return G.Mul(mat(2, 3), vec(3)) }, true},
		{"G.Mul vector matrix", func() (*G.Node, error) { return G.Mul(vec(2), mat(2, 3)) }, true},
		{"G.Mul vector vector", func() (*G.Node, error) { return G.Mul(vec(3), vec(3)) }, true},
		{"G.BatchedMatMul", func() (*G.Node, error) { return G.BatchedMatMul(t3(2, 2, 3), t3(2, 3, 2)) }, true},
		{"G.BatchedMatMul transposed", func() (*G.Node, error) { return G.BatchedMatMul(t3(2, 3, 2), t3(2, 2, 3), true, true) }, true},
		{"G.Tensordot", func() (*G.Node, error) { return G.Tensordot([]int{1}, []int{0}, mat(2, 3), mat(3, 4)) }, true},
		{"G.Conv2d's product", conv2dProduct, true},
		{"ops.Linear", func() (*G.Node, error) { return ops.Linear(mat(2, 3), mat(4, 3), nil) }, true},
		{"ops.Conv2d", func() (*G.Node, error) { return ops.Conv2d(t4(1, 2, 4, 4), t4(3, 2, 3, 3), nil, ops.ConvOpts{}) }, true},
		{"G.OuterProd", func() (*G.Node, error) { return G.OuterProd(vec(2), vec(3)) }, false},
		{"G.HadamardProd", func() (*G.Node, error) { return G.HadamardProd(mat(2, 3), mat(2, 3)) }, false},
		{"G.Mul of a scalar", func() (*G.Node, error) { return G.Mul(mat(2, 3), G.NewConstant(float32(2))) }, false},
		{"G.Im2Col", func() (*G.Node, error) {
			return G.Im2Col(t4(1, 2, 4, 4), tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := c.node()
			if err != nil {
				t.Fatal(err)
			}
			if got := k.lowerPrecision(n.Op()); got != c.want {
				t.Errorf("%v: lower precision %v, want %v", n.Op(), got, c.want)
			}
		})
	}
}
