package ops

// Shared plumbing of the normalisation, activation, regularisation, reduction and loss ops:
// the methods every op of theirs has in common, typed views of tensor memory without
// reflection, and op-owned output buffers reused from run to run.

import (
	"fmt"
	"hash"
	"math"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// nop carries what every op here shares: a unique id (so that gorgonia never merges two
// stateful instances) and a name for errors and hashes.
//
// The ops return false from ReturnsPtr, so gorgonia gives their results registers of their
// own and calls Do every run; Do writes into a buffer the op owns and returns it, which is why
// a training step allocates nothing here. An op instance belongs to one graph and must not be
// run by two machines at the same time.
type nop struct {
	id   int64
	name string
}

func newNop(name string) nop { return nop{id: NextID(), name: name} }

func (b nop) ReturnsPtr() bool      { return false }
func (b nop) CallsExtern() bool     { return false }
func (b nop) OverwritesInput() int  { return -1 }
func (b nop) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gp.%s#%d", b.name, b.id) }
func (b nop) Hashcode() uint32      { return HashOf(b) }
func (b nop) String() string        { return fmt.Sprintf("%s#%d", b.name, b.id) }

// tensorT is the type of a tensor of the given rank whose element type is the variable a.
func tensorT(dims int) hm.Type {
	if dims == 0 {
		return hm.TypeVariable('a')
	}
	return G.TensorType{Dims: dims, Of: hm.TypeVariable('a')}
}

// fnT is the function type from the ranks of the inputs to the rank of the output.
func fnT(out int, in ...int) hm.Type {
	ts := make([]hm.Type, 0, len(in)+1)
	for _, d := range in {
		ts = append(ts, tensorT(d))
	}
	return hm.NewFnType(append(ts, tensorT(out))...)
}

// nodeDtype returns n's element type, or an error naming op if it is not float32 or float64.
func nodeDtype(op string, n *G.Node) (tensor.Dtype, error) {
	if n == nil {
		return tensor.Dtype{}, fmt.Errorf("%s: nil input node", op)
	}
	dt, err := dtypeOfNode(n)
	if err != nil {
		return tensor.Dtype{}, fmt.Errorf("%s: input %s: %w", op, n.Name(), err)
	}
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return tensor.Dtype{}, fmt.Errorf("%s: input %s has dtype %v, want float32 or float64", op, n.Name(), dt)
	}
	return dt, nil
}

// sameDtype checks that all nodes share a float dtype and returns it.
func sameDtype(op string, nodes ...*G.Node) (tensor.Dtype, error) {
	dt, err := nodeDtype(op, nodes[0])
	if err != nil {
		return dt, err
	}
	for _, n := range nodes[1:] {
		d, err := nodeDtype(op, n)
		if err != nil {
			return dt, err
		}
		if d != dt {
			return dt, fmt.Errorf("%s: dtypes differ: %s is %v, %s is %v", op, nodes[0].Name(), dt, n.Name(), d)
		}
	}
	return dt, nil
}

// denseIn returns input v as a contiguous dense float tensor, materialising views.
func denseIn(op string, v G.Value) (*tensor.Dense, error) {
	d, err := Dense(op, v)
	if err != nil {
		return nil, err
	}
	if d.RequiresIterator() {
		m, ok := d.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%s: cannot materialise a %v view", op, d.Shape())
		}
		return m, nil
	}
	return d, nil
}

// slice returns d's memory as a []T without reflection (d must be contiguous and of type T).
func flat[T Float](d *tensor.Dense) []T {
	raw := d.Raw
	var z T
	n := len(raw) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(raw))), n)[:d.Shape().TotalSize()]
}

// reuse returns *buf if it already has dtype dt and the given shape, and otherwise allocates
// a new tensor and stores it in *buf.
func ownedOut(buf **tensor.Dense, dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	if b := *buf; b != nil && b.Dtype() == dt && b.Shape().Eq(shape) {
		return b
	}
	*buf = tensor.New(tensor.Of(dt), tensor.WithShape(shape.Clone()...))
	return *buf
}

// checkPrealloc validates a preallocated output handed to UsePreallocDo.
func checkPrealloc(op string, p G.Value, dt tensor.Dtype, shape tensor.Shape) (*tensor.Dense, error) {
	d, ok := p.(*tensor.Dense)
	if !ok || d.Dtype() != dt || !d.Shape().Eq(shape) || d.RequiresIterator() {
		return nil, fmt.Errorf("%s: preallocated %T does not fit a %v %v result", op, p, dt, shape)
	}
	return d, nil
}

// scalarIn reads a scalar value (a gorgonia scalar or a one-element tensor).
func scalarIn(op string, v G.Value) (float64, error) {
	switch s := v.(type) {
	case *G.F64:
		return float64(*s), nil
	case *G.F32:
		return float64(*s), nil
	case *tensor.Dense:
		if s.Shape().TotalSize() == 1 {
			switch s.Dtype() {
			case tensor.Float64:
				return flat[float64](s)[0], nil
			case tensor.Float32:
				return float64(flat[float32](s)[0]), nil
			}
		}
	}
	return 0, fmt.Errorf("%s: expected a float scalar, got %T", op, v)
}

// scalarBuf holds an op-owned scalar result of either dtype.
type scalarBuf struct {
	f32 G.F32
	f64 G.F64
}

func (s *scalarBuf) set(dt tensor.Dtype, v float64) G.Value {
	if dt == tensor.Float32 {
		s.f32 = G.F32(v)
		return &s.f32
	}
	s.f64 = G.F64(v)
	return &s.f64
}

// arity checks the number of inputs handed to Do.
func nArity(op string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s: got %d inputs, want %d", op, got, want)
	}
	return nil
}

// inShapes converts InferShape's arguments to shapes.
func inShapes(op string, in []G.DimSizer, want int) ([]tensor.Shape, error) {
	if len(in) != want {
		return nil, fmt.Errorf("%s: got %d input shapes, want %d", op, len(in), want)
	}
	out := make([]tensor.Shape, len(in))
	for i, s := range in {
		sh, ok := s.(tensor.Shape)
		if !ok {
			return nil, fmt.Errorf("%s: input %d: expected a shape, got %T", op, i, s)
		}
		out[i] = sh
	}
	return out, nil
}

// valueDtype is the dtype of a scalar or tensor value (float64 unless it says float32).
func valueDtype(v G.Value) tensor.Dtype {
	switch s := v.(type) {
	case *G.F32:
		return tensor.Float32
	case *tensor.Dense:
		return s.Dtype()
	}
	return tensor.Float64
}

// invSqrt is 1/sqrt(v), kept in one place so every op rounds alike.
func invSqrt(v float64) float64 { return 1 / math.Sqrt(v) }

// dtypeOfNode returns the element type of a tensor or scalar node.
func dtypeOfNode(n *G.Node) (tensor.Dtype, error) {
	switch t := n.Type().(type) {
	case tensor.Dtype:
		return t, nil
	case G.TensorType:
		if dt, ok := t.Of.(tensor.Dtype); ok {
			return dt, nil
		}
	case *G.TensorType:
		if dt, ok := t.Of.(tensor.Dtype); ok {
			return dt, nil
		}
	}
	return tensor.Dtype{}, fmt.Errorf("no concrete dtype in type %v", n.Type())
}
