package tape

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// kernel is what a node lowers to: run computes the node's value into out from its inputs'
// values, or the value is a view of input 0 (alias), or the node is a gradient hook.
type kernel struct {
	run     func(d *cuda.Device, out *cuda.Tensor, in []*cuda.Tensor) error
	alias   bool
	hook    bool
	kernels []string  // the device kernels run launches, checked at Compile
	extra   []*G.Node // nodes run reads after the node's inputs (a backward's forward inputs)
}

// lowerFunc lowers node n, whose op has the description desc (its String()), with inputs in.
type lowerFunc func(n *G.Node, desc string, in []*G.Node) (*kernel, error)

// Op table: the op's type (package.Type, without the pointer) to its lowering, for gorgonia's
// ops (those users write). The project's own ops are lowered by their descriptions
// (ops.Describe, which also describes the ops of other packages that implement
// ops.Describer, such as models/swin's; amp.DescribeOp; lowerNode).
var table = map[string]lowerFunc{
	"gorgonia.elemBinOp":     lowerBinary,
	"gorgonia.elemUnaryOp":   lowerUnary,
	"gorgonia.linAlgBinOp":   lowerLinAlg,
	"gorgonia.sumOp":         lowerSum,
	"gorgonia.repeatOp":      lowerRepeat,
	"gorgonia.reshapeOp":     lowerAlias,
	"gorgonia.transposeOp":   lowerTranspose,
	"gorgonia.softmaxOp":     lowerSoftmax,
	"gorgonia.softmaxDiffOp": lowerSoftmaxDiff,
	"nn.tapOp":               lowerAlias,
	"nn.gradHookOp":          func(*G.Node, string, []*G.Node) (*kernel, error) { return &kernel{hook: true}, nil },
}

// opType is the op's Go type without pointer and package path: "gorgonia.elemBinOp".
func opType(op G.Op) string { return strings.TrimPrefix(fmt.Sprintf("%T", op), "*") }

// lowerNode lowers the project's ops by their descriptions (ops.Describe: nn/ops's and every
// ops.Describer's, models/swin's among them; amp.DescribeOp) and gorgonia's by the table.
func (p *Program) lowerNode(n *G.Node, in []*G.Node) (*kernel, error) {
	if k, ok, err := p.lowerAutocast(n, in); ok || err != nil {
		return k, err
	}
	op := n.Op()
	if d, ok := ops.Describe(op); ok {
		return p.lowerNN(n, d, in)
	}
	if d, ok := amp.DescribeOp(op); ok {
		return lowerAmp(d)
	}
	return lower(n, in)
}

func lower(n *G.Node, in []*G.Node) (*kernel, error) {
	op := n.Op()
	f, ok := table[opType(op)]
	if !ok {
		return nil, errNoKernel
	}
	return f(n, op.String(), in)
}

var errNoKernel = fmt.Errorf("no device kernel for this op")

func lowerAlias(n *G.Node, _ string, in []*G.Node) (*kernel, error) {
	if len(in) != 1 || in[0].Shape().TotalSize() != n.Shape().TotalSize() {
		return nil, fmt.Errorf("a view of %d inputs", len(in))
	}
	return &kernel{alias: true}, nil
}

// lowerBinary: gorgonia's "+ false", "⊙ false", ">= true", ...: the symbol, then whether a
// comparison returns the operands' type (1/0) rather than bools, which the device lacks.
func lowerBinary(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	f := strings.Fields(desc)
	if len(f) != 2 || len(in) != 2 {
		return nil, errNoKernel
	}
	op, ok := cuda.BinaryOpSymbol(f[0])
	if !ok {
		return nil, errNoKernel
	}
	if op >= cuda.LtOp && f[1] != "true" {
		return nil, fmt.Errorf("a comparison returning bools (the device holds float32 only; compare with retSame)")
	}
	size := n.Shape().TotalSize()
	for _, x := range in {
		if s := x.Shape().TotalSize(); s != size && s != 1 {
			return nil, fmt.Errorf("operand %v against output %v", x.Shape(), n.Shape())
		}
	}
	return &kernel{kernels: []string{"binary_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return d.Binary(out, x[0], x[1], op)
	}}, nil
}

func lowerUnary(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	op, ok := cuda.UnaryOpNamed(desc)
	if !ok || len(in) != 1 {
		return nil, errNoKernel
	}
	return &kernel{kernels: []string{"unary_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return d.Unary(out, x[0], op)
	}}, nil
}

// lowerLinAlg: "A × B" (matmul), "A × b" (matrix-vector), "a ⋅ b" (dot), "a ⊗ b" (outer),
// "A ××× B" (batched), each operand followed by ᵀ when transposed. All are one cuBLAS GEMM
// over 2-D (3-D when batched) views of the operands.
func lowerLinAlg(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	if len(in) != 2 {
		return nil, errNoKernel
	}
	ta := strings.HasPrefix(desc, "Aᵀ") || strings.HasPrefix(desc, "aᵀ")
	tb := strings.HasSuffix(desc, "ᵀ")
	as, bs, ys := dims(in[0]), dims(in[1]), dims(n)
	var av, bv, yv []int // the GEMM's 2-D views
	batched := false
	switch {
	case strings.Contains(desc, "×××"):
		if len(as) != 3 || len(bs) != 3 || len(ys) != 3 {
			return nil, fmt.Errorf("batched matmul of %v and %v", as, bs)
		}
		batched = true
	case strings.Contains(desc, " × B"):
		if len(as) != 2 || len(bs) != 2 {
			return nil, fmt.Errorf("matmul of %v and %v", as, bs)
		}
		av, bv, yv = as, bs, ys
	case strings.Contains(desc, " × b"):
		if len(as) != 2 || len(bs) != 1 {
			return nil, fmt.Errorf("matrix-vector product of %v and %v", as, bs)
		}
		av, bv, yv, tb = as, []int{bs[0], 1}, []int{ys[0], 1}, false
	case strings.Contains(desc, "⋅"):
		av, bv, yv, ta, tb = []int{1, as[0]}, []int{bs[0], 1}, []int{1, 1}, false, false
	case strings.Contains(desc, "⊗"):
		av, bv, yv, ta, tb = []int{as[0], 1}, []int{1, bs[0]}, ys, false, false
	default:
		return nil, errNoKernel
	}
	return &kernel{run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		if batched {
			return d.MatMulBatched(out, x[0], x[1], ta, tb, 1, 0)
		}
		a, err := x[0].View(0, av...)
		if err != nil {
			return err
		}
		b, err := x[1].View(0, bv...)
		if err != nil {
			return err
		}
		y, err := out.View(0, yv...)
		if err != nil {
			return err
		}
		return d.MatMul(y, a, b, ta, tb, 1, 0)
	}}, nil
}

// lowerSum: "Σ[0 1]", the axes summed. Each run of adjacent axes is one pass of sum_axis_f32
// over the input viewed as [outer, k, inner], the last axes first.
func lowerSum(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	axes, err := parseInts(strings.TrimPrefix(desc, "Σ"), " ")
	if err != nil || len(in) != 1 {
		return nil, errNoKernel
	}
	shape := dims(in[0])
	slices.Sort(axes)
	axes = slices.Compact(axes)
	for _, a := range axes {
		if a < 0 || a >= len(shape) {
			return nil, fmt.Errorf("axis %d of %v", a, shape)
		}
	}
	type pass struct{ outer, k, inner int }
	var passes []pass
	cur := slices.Clone(shape)
	for i := len(axes) - 1; i >= 0; {
		hi := axes[i]
		lo := hi
		for i--; i >= 0 && axes[i] == lo-1; i-- {
			lo--
		}
		passes = append(passes, pass{prod(cur[:lo]), prod(cur[lo : hi+1]), prod(cur[hi+1:])})
		cur = append(cur[:lo:lo], cur[hi+1:]...)
	}
	if prod(cur) != n.Shape().TotalSize() {
		return nil, fmt.Errorf("sum of %v over %v gives %d elements, node has %v", shape, axes, prod(cur), n.Shape())
	}
	return &kernel{kernels: []string{"sum_axis_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		src := x[0]
		for i, p := range passes {
			dst := out
			if i < len(passes)-1 {
				t, err := d.Alloc(cuda.Float32, p.outer*p.inner)
				if err != nil {
					return err
				}
				defer t.Free()
				dst = t
			}
			if err := d.SumAxis(dst, src, p.outer, p.k, p.inner); err != nil {
				return err
			}
			src = dst
		}
		return nil
	}}, nil
}

// lowerRepeat: "Repeat<axis>" with inputs (x, the count): the count is the output's size on
// the axis over x's, known from the static shapes (the count node is folded).
func lowerRepeat(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	axis, err := strconv.Atoi(strings.TrimPrefix(desc, "Repeat"))
	if err != nil || len(in) != 2 {
		return nil, errNoKernel
	}
	ys, xs := dims(n), dims(in[0])
	for len(xs) < len(ys) { // a scalar, or fewer dimensions: leading ones
		xs = append([]int{1}, xs...)
	}
	if axis < 0 || axis >= len(ys) || len(xs) != len(ys) || xs[axis] == 0 || ys[axis]%xs[axis] != 0 {
		return nil, fmt.Errorf("repeat of %v along %d into %v", in[0].Shape(), axis, n.Shape())
	}
	for i := range ys {
		if i != axis && xs[i] != ys[i] {
			return nil, fmt.Errorf("repeat of %v along %d into %v", in[0].Shape(), axis, n.Shape())
		}
	}
	outer, dim, rep, inner := prod(ys[:axis]), xs[axis], ys[axis]/xs[axis], prod(ys[axis+1:])
	return &kernel{kernels: []string{"repeat_axis_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return d.Repeat(out, x[0], outer, dim, rep, inner)
	}}, nil
}

// lowerTranspose: "Aᵀ{1, 0}", the permutation.
func lowerTranspose(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	s := strings.TrimSuffix(strings.TrimPrefix(desc, "Aᵀ{"), "}")
	perm, err := parseInts(strings.ReplaceAll(s, ",", ""), " ")
	if err != nil || len(in) != 1 || len(perm) != len(dims(in[0])) {
		return nil, errNoKernel
	}
	return &kernel{kernels: []string{"permute_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		src, err := x[0].View(0, dims(in[0])...)
		if err != nil {
			return err
		}
		return d.Permute(out, src, perm...)
	}}, nil
}

// softmaxAxis parses "Softmax{axis, isLog}()" (and SoftmaxDiff's): the device has the
// softmax over the last axis, not the log-softmax.
func softmaxAxis(desc, prefix string, x *G.Node) error {
	f := strings.Fields(strings.NewReplacer(prefix+"{", "", ",", " ", "}()", "").Replace(desc))
	if len(f) != 2 {
		return errNoKernel
	}
	axis, err := strconv.Atoi(f[0])
	if err != nil {
		return errNoKernel
	}
	if f[1] != "false" {
		return fmt.Errorf("log-softmax has no device kernel: use softmax followed by a log, or train this model on the CPU")
	}
	if r := len(dims(x)); axis != r-1 && axis != -1 {
		return fmt.Errorf("softmax over axis %d of %v: the device kernel takes the last axis", axis, x.Shape())
	}
	return nil
}

func lowerSoftmax(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	if len(in) != 1 {
		return nil, errNoKernel
	}
	if err := softmaxAxis(desc, "Softmax", in[0]); err != nil {
		return nil, err
	}
	return &kernel{kernels: []string{"softmax_rows_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return d.Softmax(out, x[0])
	}}, nil
}

// lowerSoftmaxDiff: inputs (x, y, dy), dx = y*(dy - Σ dy*y) over the last axis.
func lowerSoftmaxDiff(n *G.Node, desc string, in []*G.Node) (*kernel, error) {
	if len(in) != 3 {
		return nil, errNoKernel
	}
	if err := softmaxAxis(desc, "SoftmaxDiff", in[0]); err != nil {
		return nil, err
	}
	return &kernel{kernels: []string{"softmax_bwd_rows_f32"}, run: func(d *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return d.SoftmaxBackward(out, x[1], x[2])
	}}, nil
}

// foldable reports whether n's value is known at Compile: a constant, a size of a static
// shape, or a scalar op of such values.
func foldable(n *G.Node, in []*G.Node, folded map[*G.Node]G.Value) bool {
	desc := n.Op().String()
	switch t := opType(n.Op()); {
	case strings.HasPrefix(t, "gorgonia.constant"):
		return true
	case t == "gorgonia.sizeOp":
		return true
	case t == "gorgonia.elemBinOp" || t == "gorgonia.elemUnaryOp":
		if !n.IsScalar() {
			return false
		}
		for _, x := range in {
			if _, ok := folded[x]; !ok {
				return false
			}
		}
		return desc != ""
	}
	return false
}

// fold computes a foldable node's value on the host.
func fold(n *G.Node, in []*G.Node, folded map[*G.Node]G.Value) (G.Value, error) {
	op := n.Op()
	if opType(op) == "gorgonia.sizeOp" {
		// "SizeOf=8" when gorgonia knew the size, "SizeOf(1)" (the axis) otherwise.
		desc := op.String()
		if v, ok := strings.CutPrefix(desc, "SizeOf="); ok {
			size, err := strconv.Atoi(v)
			if err != nil {
				return nil, err
			}
			return G.NewF32(float32(size)), nil
		}
		axis, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(desc, "SizeOf("), ")"))
		if err != nil || len(in) != 1 || axis >= len(dims(in[0])) {
			return nil, fmt.Errorf("size %q of %v", desc, in[0].Shape())
		}
		return G.NewF32(float32(dims(in[0])[axis])), nil
	}
	vals := make([]G.Value, len(in))
	for i, x := range in {
		vals[i] = folded[x]
	}
	return op.Do(vals...)
}

// hostF32 returns a folded value as float32s.
func hostF32(v G.Value) ([]float32, error) {
	switch d := v.Data().(type) {
	case float32:
		return []float32{d}, nil
	case []float32:
		return d, nil
	}
	return nil, fmt.Errorf("folded value %v is %T, want float32", v, v.Data())
}

func dims(n *G.Node) []int { return []int(n.Shape()) }

func prod(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}

func parseInts(s, sep string) ([]int, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
	var out []int
	for _, f := range strings.Split(s, sep) {
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
