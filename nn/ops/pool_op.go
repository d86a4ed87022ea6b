package ops

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// MaxPool2d is torch.nn.functional.max_pool2d with ceil_mode=false and dilation 1: x is
// [N, C, H, W], the output [N, C, Ho, Wo] with Ho = floor((H + 2*pad - kh)/stride) + 1.
// Padding counts as -inf and must be at most half the kernel (PyTorch's rule); a zero
// stride entry means the kernel size (PyTorch's default). NaN propagates (as in PyTorch, a NaN replaces the running maximum). The gradient goes
// to the first maximum of each window in row-major order, as PyTorch's CPU kernel.
func MaxPool2d(x *G.Node, kernel, stride, padding [2]int) (*G.Node, error) {
	const name = "ops.MaxPool2d"
	if err := kernCheckFloat(name, x); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if xs.Dims() != 4 {
		return nil, fmt.Errorf("%s: x %v must have rank 4 ([N,C,H,W])", name, xs)
	}
	for i := range stride {
		if stride[i] == 0 {
			stride[i] = kernel[i]
		}
	}
	g := convGeom{C: xs[1], H: xs[2], W: xs[3], KH: kernel[0], KW: kernel[1], SH: stride[0], SW: stride[1],
		PH: padding[0], PW: padding[1], DH: 1, DW: 1, Groups: 1}
	switch {
	case xs.TotalSize() == 0:
		return nil, fmt.Errorf("%s: x %v is empty", name, xs)
	case g.KH < 1 || g.KW < 1 || g.SH < 1 || g.SW < 1:
		return nil, fmt.Errorf("%s: x %v: kernel %v and stride %v must be positive", name, xs, kernel, stride)
	case g.PH < 0 || g.PW < 0 || 2*g.PH > g.KH || 2*g.PW > g.KW:
		return nil, fmt.Errorf("%s: x %v: padding %v must be between 0 and half the kernel %v", name, xs, padding, kernel)
	}
	g.OH, g.OW = convOutSize(g.H, g.KH, g.SH, g.PH, 1), convOutSize(g.W, g.KW, g.SW, g.PW, 1)
	if g.OH < 1 || g.OW < 1 {
		return nil, fmt.Errorf("%s: x %v: kernel %v with padding %v gives an empty output", name, xs, kernel, padding)
	}
	if g.H*g.W > math.MaxInt32 {
		return nil, fmt.Errorf("%s: x %v: a plane of more than 2^31 elements", name, xs)
	}
	op := &maxPoolOp{kernBase: newKernBase(name, 1), g: g, n: xs[0], sc: new(maxPoolScratch)}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("%s: x %v: %w", name, xs, err)
	}
	return y, nil
}

// AdaptiveAvgPool2d1 is torch.nn.AdaptiveAvgPool2d(1), the global average: [N, C, H, W] ->
// [N, C, 1, 1]. (gorgonia's GlobalAveragePool2D has no gradient and Mean over axes 2, 3 is
// wrong in tensor v0.9.24; see docs/DESIGN.md §1.)
func AdaptiveAvgPool2d1(x *G.Node) (*G.Node, error) {
	const name = "ops.AdaptiveAvgPool2d1"
	if err := kernCheckFloat(name, x); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if xs.Dims() != 4 || xs.TotalSize() == 0 {
		return nil, fmt.Errorf("%s: x %v must be a non-empty rank-4 tensor ([N,C,H,W])", name, xs)
	}
	op := &avgPoolOp{kernBase: newKernBase(name, 1), xs: xs.Clone()}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("%s: x %v: %w", name, xs, err)
	}
	return y, nil
}

// Flatten is torch.flatten(x, 1): [N, ...] -> [N, prod(...)]. It is gorgonia's Reshape,
// whose forward and gradient pass the gradient checks (pool_test.go).
func Flatten(x *G.Node) (*G.Node, error) {
	const name = "ops.Flatten"
	if x == nil {
		return nil, fmt.Errorf("%s: x is nil", name)
	}
	xs := x.Shape()
	if xs.Dims() < 2 {
		return nil, fmt.Errorf("%s: x %v must have rank >= 2 ([N, ...])", name, xs)
	}
	y, err := G.Reshape(x, tensor.Shape{xs[0], xs.TotalSize() / max(xs[0], 1)})
	if err != nil {
		return nil, fmt.Errorf("%s: x %v: %w", name, xs, err)
	}
	return y, nil
}

// maxPoolOp is MaxPool2d's forward; maxPoolOp with grad set is its gradient (inputs x, dy).
type maxPoolOp struct {
	kernBase
	g    convGeom
	n    int
	grad bool
	sc   *maxPoolScratch // shared by the forward and its gradient
}

func (op *maxPoolOp) outShape() tensor.Shape {
	if op.grad {
		return tensor.Shape{op.n, op.g.C, op.g.H, op.g.W}
	}
	return tensor.Shape{op.n, op.g.C, op.g.OH, op.g.OW}
}

// Type is x -> y, or (x, dy) -> dx; all 4-D.
func (op *maxPoolOp) Type() hm.Type {
	t4 := G.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	if op.grad {
		return hm.NewFnType(t4, t4, t4)
	}
	return hm.NewFnType(t4, t4)
}

// InferShape returns the output (or, for the gradient, the input) shape.
func (op *maxPoolOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.outShape(), nil }

// Do runs the op into its own output tensor.
func (op *maxPoolOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo runs the op into the op's reused output (see kernPrealloc).
func (op *maxPoolOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *maxPoolOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.g) }

// Hashcode hashes WriteHash.
func (op *maxPoolOp) Hashcode() uint32 { return HashOf(op) }

func (op *maxPoolOp) String() string {
	return fmt.Sprintf("%s{%dx%d s%d,%d p%d,%d}", op.name, op.g.KH, op.g.KW, op.g.SH, op.g.SW, op.g.PH, op.g.PW)
}

// DiffWRT: the forward is differentiable with respect to x.
func (op *maxPoolOp) DiffWRT(n int) []bool { return []bool{!op.grad} }

// SymDiff returns dx = MaxPool2dGrad(x, dy).
func (op *maxPoolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("%s: no second derivative", op.name)
	}
	dx, err := G.ApplyOp(&maxPoolOp{kernBase: newKernBase("ops.MaxPool2d.grad", 2), g: op.g, n: op.n, grad: true, sc: op.sc}, inputs[0], grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

func (op *maxPoolOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return maxPool(op, in, out.Data().([]float32))
	}
	return maxPool(op, in, out.Data().([]float64))
}

// avgPoolOp is the global average over H and W (forward: x -> [N,C,1,1]) or its gradient
// (grad: dy [N,C,1,1] -> dx [N,C,H,W], dy/(H*W) everywhere).
type avgPoolOp struct {
	kernBase
	xs   tensor.Shape
	grad bool
}

func (op *avgPoolOp) outShape() tensor.Shape {
	if op.grad {
		return op.xs
	}
	return tensor.Shape{op.xs[0], op.xs[1], 1, 1}
}

// Type is 4-D -> 4-D.
func (op *avgPoolOp) Type() hm.Type {
	t4 := G.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4)
}

// InferShape returns [N,C,1,1] (forward) or x's shape (gradient).
func (op *avgPoolOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return op.outShape().Clone(), nil
}

// Do runs the op into its own output tensor.
func (op *avgPoolOp) Do(in ...G.Value) (G.Value, error) { return kernDo(op, &op.kernBase, in) }

// UsePreallocDo runs the op into the op's reused output (see kernPrealloc).
func (op *avgPoolOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	return kernPrealloc(op, &op.kernBase, p, in)
}

// WriteHash writes the op's identity.
func (op *avgPoolOp) WriteHash(h hash.Hash) { kernHash(h, &op.kernBase, op.xs) }

// Hashcode hashes WriteHash.
func (op *avgPoolOp) Hashcode() uint32 { return HashOf(op) }
func (op *avgPoolOp) String() string   { return op.name }

// DiffWRT: the forward is differentiable with respect to x.
func (op *avgPoolOp) DiffWRT(n int) []bool { return []bool{!op.grad} }

// SymDiff returns dx = dy/(H*W) broadcast over H and W.
func (op *avgPoolOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("%s: no second derivative", op.name)
	}
	dx, err := G.ApplyOp(&avgPoolOp{kernBase: newKernBase("ops.AdaptiveAvgPool2d1.grad", 1), xs: op.xs, grad: true}, grad)
	if err != nil {
		return nil, fmt.Errorf("%s: gradient: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

func (op *avgPoolOp) exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error {
	if dt == tensor.Float32 {
		return avgPool(op, in, out.Data().([]float32))
	}
	return avgPool(op, in, out.Data().([]float64))
}

func avgPool[T Float](op *avgPoolOp, in []G.Value, dst []T) error {
	planes, hw := op.xs[0]*op.xs[1], op.xs[2]*op.xs[3]
	inv := 1 / T(hw)
	if op.grad {
		dy, err := kernData[T](op.name, in[0], "dy", planes)
		if err != nil {
			return err
		}
		for p, d := range dy {
			v := d * inv
			row := dst[p*hw : (p+1)*hw]
			for i := range row {
				row[i] = v
			}
		}
		return nil
	}
	x, err := kernData[T](op.name, in[0], "x", planes*hw)
	if err != nil {
		return err
	}
	for p := range planes {
		var s T
		for _, v := range x[p*hw : (p+1)*hw] {
			s += v
		}
		dst[p] = s * inv
	}
	return nil
}
