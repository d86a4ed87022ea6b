package cuda

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// The graph executor's generic operations (cuda/tape): gorgonia's pointwise ops, reductions
// along one axis and repeats. Every tensor is float32 and contiguous; shapes are given as
// [outer, k, inner] views so that one kernel serves every axis.

// UnaryOp is a pointwise function of one float32 (y = f(x)). The formulas are gorgonia's
// float32 ones (sigmoid is 0 below -88 and 1 above 15, softplus x above 14 and 0 below -103,
// sign(-0) is -1).
type UnaryOp int32

// Unary operations, numbered as the unary_f32 kernel's codes.
const (
	Abs UnaryOp = iota
	Sign
	Ceil
	Floor
	Sin
	Cos
	Exp
	Log
	Log2
	Neg
	Square
	Sqrt
	Inverse
	InverseSqrt
	Cube
	Tanh
	Sigmoid
	Log1p
	Expm1
	Softplus
	numUnary
)

var unaryNames = [numUnary]string{"abs", "sign", "ceil", "floor", "sin", "cos", "exp", "ln", "log2", "neg",
	"square", "sqrt", "inv", "invSqrt", "cube", "tanh", "sigmoid", "log1p", "expm1", "softplus"}

// String is gorgonia's name of the operation ("square", "ln", "sigmoid").
func (op UnaryOp) String() string {
	if op < 0 || op >= numUnary {
		return fmt.Sprintf("unary(%d)", int32(op))
	}
	return unaryNames[op]
}

// UnaryOpNamed returns the operation gorgonia names name, or false.
func UnaryOpNamed(name string) (UnaryOp, bool) {
	for i, n := range unaryNames {
		if n == name {
			return UnaryOp(i), true
		}
	}
	return 0, false
}

// BinaryOp is a pointwise function of two float32. Comparisons give 1 or 0.
type BinaryOp int32

// Binary operations, numbered as the binary_f32 kernel's codes.
const (
	AddOp BinaryOp = iota
	SubOp
	MulOp
	DivOp
	PowOp
	LtOp
	GtOp
	LteOp
	GteOp
	EqOp
	NeOp
	numBinary
)

var binarySymbols = [numBinary]string{"+", "-", "⊙", "÷", "^", "<", ">", "<=", ">=", "==", "!="}

// String is gorgonia's symbol of the operation ("+", "⊙", ">=").
func (op BinaryOp) String() string {
	if op < 0 || op >= numBinary {
		return fmt.Sprintf("binary(%d)", int32(op))
	}
	return binarySymbols[op]
}

// BinaryOpSymbol returns the operation gorgonia writes as sym, or false.
func BinaryOpSymbol(sym string) (BinaryOp, bool) {
	for i, s := range binarySymbols {
		if s == sym {
			return BinaryOp(i), true
		}
	}
	return 0, false
}

// Unary computes y = op(x) elementwise; y may alias x.
func (d *Device) Unary(y, x *Tensor, op UnaryOp) error {
	if op < 0 || op >= numUnary {
		return fmt.Errorf("cuda: device %d: unary: no operation %d", d.ordinal, int32(op))
	}
	if err := d.check("unary "+op.String(), Float32, y, x); err != nil {
		return err
	}
	return d.launch("unary_f32", y.n, ptr(y), ptr(x), driver.ArgI32(int(op)), driver.ArgI64(int64(y.n)))
}

// Binary computes y = a op b elementwise. a and b have y's number of elements, or one
// element, which is then used against every element of the other (gorgonia's scalar-tensor
// operations). y may alias a or b where they have y's size.
func (d *Device) Binary(y, a, b *Tensor, op BinaryOp) error {
	if op < 0 || op >= numBinary {
		return fmt.Errorf("cuda: device %d: binary: no operation %d", d.ordinal, int32(op))
	}
	name := "binary " + op.String()
	if err := d.check(name, Float32, y); err != nil {
		return err
	}
	for _, t := range []*Tensor{a, b} {
		if t == nil || t.d != d || t.dtype != Float32 || (t.n != y.n && t.n != 1) {
			return fmt.Errorf("cuda: device %d: %s: operand %v, want float32 of %d elements or 1", d.ordinal, name, shapeOf(t), y.n)
		}
	}
	sa, sb := 1, 1
	if a.n != y.n {
		sa = 0
	}
	if b.n != y.n {
		sb = 0
	}
	return d.launch("binary_f32", y.n, ptr(y), ptr(a), ptr(b), driver.ArgI32(int(op)), driver.ArgI64(int64(y.n)),
		driver.ArgI32(sa), driver.ArgI32(sb))
}

// SumAxis computes y[o, i] = Σ_j x[o, j, i] for x viewed as [outer, k, inner] and y as
// [outer, inner] in float32: in order of j (as tensor's Sum), or, for a long axis and too few
// outputs to fill the device (colSplit), in chunks of j summed in parallel and then in order,
// the same on every run.
func (d *Device) SumAxis(y, x *Tensor, outer, k, inner int) error {
	if outer < 0 || k < 0 || inner < 0 || x == nil || y == nil || x.n != outer*k*inner || y.n != outer*inner {
		return fmt.Errorf("cuda: device %d: sum axis: x %v, y %v for [%d, %d, %d]", d.ordinal, shapeOf(x), shapeOf(y), outer, k, inner)
	}
	if err := d.check("sum axis", Float32, y); err != nil {
		return err
	}
	if err := d.check("sum axis", Float32, x); err != nil {
		return err
	}
	if parts, chunk, ok := d.colSplit(k, (inner+31)/32*outer); ok && outer <= 65535 {
		part, err := d.Alloc(Float32, outer, parts, inner)
		if err != nil {
			return err
		}
		defer part.Free() // stream order: the second pass reads it first
		grid := driver.Dim3{X: uint32((inner + 31) / 32), Y: uint32(parts), Z: uint32(outer)}
		if err := d.launchGrid("sum_axis_part_f32", grid, 256, 256*4, ptr(part), ptr(x), driver.ArgI64(int64(k)),
			driver.ArgI64(int64(inner)), driver.ArgI64(int64(chunk))); err != nil {
			return err
		}
		x, k = part, parts
	}
	return d.launch("sum_axis_f32", y.n, ptr(y), ptr(x), driver.ArgI64(int64(outer)), driver.ArgI64(int64(k)), driver.ArgI64(int64(inner)))
}

// colSplit decides how a column sum over rows rows, whose columns make colBlocks blocks of 32,
// is cut into row chunks for a first pass (sum_axis_part_f32, layernorm_bwd_params_part_f32):
// only when one thread per column would leave the device mostly idle (fewer blocks than 4 per
// SM) over a long axis (at least colSplitRows rows), into enough chunks of at least
// colSplitRows rows to give 4 blocks per SM.
func (d *Device) colSplit(rows, colBlocks int) (parts, chunk int, ok bool) {
	target := 4 * max(d.sms, 1)
	if rows < 2*colSplitRows || colBlocks >= target {
		return 1, rows, false
	}
	parts = min((target+colBlocks-1)/colBlocks, rows/colSplitRows)
	chunk = (rows + parts - 1) / parts
	return (rows + chunk - 1) / chunk, chunk, true
}

// colSplitRows is the shortest row chunk of a split column sum.
const colSplitRows = 64

// Repeat writes into y [outer, dim*rep, inner] every slice of x [outer, dim, inner] rep times
// along the middle axis, as numpy.repeat and gorgonia's Repeat (a broadcast when dim is 1).
func (d *Device) Repeat(y, x *Tensor, outer, dim, rep, inner int) error {
	if outer < 0 || dim < 0 || rep < 0 || inner < 0 || x == nil || y == nil || x.n != outer*dim*inner || y.n != outer*dim*rep*inner {
		return fmt.Errorf("cuda: device %d: repeat: x %v, y %v for [%d, %d×%d, %d]", d.ordinal, shapeOf(x), shapeOf(y), outer, dim, rep, inner)
	}
	if err := d.check("repeat", Float32, y); err != nil {
		return err
	}
	if err := d.check("repeat", Float32, x); err != nil {
		return err
	}
	return d.launch("repeat_axis_f32", y.n, ptr(y), ptr(x), driver.ArgI64(int64(outer)), driver.ArgI32(dim), driver.ArgI32(rep), driver.ArgI64(int64(inner)))
}

func shapeOf(t *Tensor) string {
	if t == nil {
		return "nil"
	}
	return fmt.Sprintf("%v %v", t.dtype, t.shape)
}
