package amp

import (
	"fmt"
	"hash"
	"unsafe"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Round returns x rounded elementwise to format f, as a node of x's dtype (float32 or
// float64) and shape: the emulation of a cast to 16 bits and back. Its gradient is the
// incoming gradient rounded to f, which is what 16-bit training computes: the cast's
// backward passes the gradient straight through, and the gradient arrives in 16 bits.
func Round(x *G.Node, f Format) (*G.Node, error) {
	if err := f.valid(); err != nil {
		return nil, err
	}
	if x == nil {
		return nil, fmt.Errorf("amp: round: nil input node")
	}
	dt, err := nodeDtype(x)
	if err != nil {
		return nil, fmt.Errorf("amp: round %s: %w", x.Name(), err)
	}
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, fmt.Errorf("amp: round %s: dtype %v, want float32 or float64", x.Name(), dt)
	}
	if x.Shape().IsScalar() {
		return nil, fmt.Errorf("amp: round %s: input is a scalar, want a tensor", x.Name())
	}
	y, err := G.ApplyOp(&roundOp{id: ops.NextID(), format: f, dims: x.Dims()}, x)
	if err != nil {
		return nil, fmt.Errorf("amp: round %s %v: %w", x.Name(), x.Shape(), err)
	}
	return y, nil
}

// roundOp is the elementwise rounding; each instance owns its output buffer, so its hash is
// unique (gorgonia must not merge two of them).
type roundOp struct {
	id     int64
	format Format
	dims   int
	out    *tensor.Dense
}

func (op *roundOp) name() string { return "Round" + op.format.String() }

func (op *roundOp) Arity() int { return 1 }

func (op *roundOp) Type() hm.Type {
	a := hm.Type(G.TensorType{Dims: op.dims, Of: hm.TypeVariable('a')})
	return hm.NewFnType(a, a)
}

func (op *roundOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: got %d input shapes, want 1", op.name(), len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("%s: expected a shape, got %T", op.name(), in[0])
	}
	return s.Clone(), nil
}

func (op *roundOp) ReturnsPtr() bool      { return false }
func (op *roundOp) CallsExtern() bool     { return false }
func (op *roundOp) OverwritesInput() int  { return -1 }
func (op *roundOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gp.amp.%s#%d", op.name(), op.id) }
func (op *roundOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *roundOp) String() string        { return fmt.Sprintf("%s#%d", op.name(), op.id) }

func (op *roundOp) Do(in ...G.Value) (G.Value, error) {
	x, err := op.input(in)
	if err != nil {
		return nil, err
	}
	if b := op.out; b == nil || b.Dtype() != x.Dtype() || !b.Shape().Eq(x.Shape()) {
		op.out = tensor.New(tensor.Of(x.Dtype()), tensor.WithShape(x.Shape().Clone()...))
	}
	return op.do(op.out, x), nil
}

// UsePreallocDo ignores the machine's register value and rounds into the op's own output,
// as every op of nn/ops does: a register can alias a value that is still live.
func (op *roundOp) UsePreallocDo(_ G.Value, in ...G.Value) (G.Value, error) { return op.Do(in...) }

func (op *roundOp) DiffWRT(int) []bool { return []bool{true} }

// SymDiff rounds the incoming gradient to the same format (straight-through otherwise).
func (op *roundOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	dx, err := Round(grad, op.format)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name(), err)
	}
	return G.Nodes{dx}, nil
}

func (op *roundOp) input(in []G.Value) (*tensor.Dense, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: got %d inputs, want 1", op.name(), len(in))
	}
	x, err := ops.Dense(op.name(), in[0])
	if err != nil {
		return nil, err
	}
	if x.RequiresIterator() {
		m, ok := x.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%s: cannot materialise a %v view", op.name(), x.Shape())
		}
		x = m
	}
	return x, nil
}

// roundGrain is the fewest elements per goroutine worth splitting a rounding pass for.
const roundGrain = 1 << 15

// roundThreads is the number of parts a rounding pass splits into at most (a variable for
// the tests, which run at one thread).
var roundThreads = ops.Threads

func (op *roundOp) do(out, x *tensor.Dense) G.Value {
	n := x.Shape().TotalSize()
	if x.Dtype() == tensor.Float32 {
		dst, src := flat[float32](out, n), flat[float32](x, n)
		// Split across the kernels' threads (ops.ForkJoin) as their elementwise ops are:
		// on one core the rounding passes cost resnet18 at two threads 62% over float32.
		w := min(roundThreads(), n/roundGrain)
		if w <= 1 {
			RoundSlice32(op.format, dst, src)
			return out
		}
		ops.ForkJoin(w, func(i int) {
			lo, hi := i*n/w, (i+1)*n/w
			RoundSlice32(op.format, dst[lo:hi], src[lo:hi])
		})
		return out
	}
	src, dst := flat[float64](x, n), flat[float64](out, n)
	for i, v := range src {
		dst[i] = Round64(op.format, v)
	}
	return out
}

// flat views a contiguous dense tensor's memory as n elements of T without reflection.
func flat[T float32 | float64](d *tensor.Dense, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(d.Raw))), n)
}

// nodeDtype is the element type of a scalar or tensor node.
func nodeDtype(n *G.Node) (tensor.Dtype, error) {
	switch t := n.Type().(type) {
	case tensor.Dtype:
		return t, nil
	case G.TensorType:
		if dt, ok := t.Of.(tensor.Dtype); ok {
			return dt, nil
		}
	}
	return tensor.Dtype{}, fmt.Errorf("node %s has type %v, want a float tensor", n.Name(), n.Type())
}
