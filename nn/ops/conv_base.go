package ops

import (
	"fmt"
	"hash"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// kernOp is what the ops in conv_*, linear_* and pool_* files have in common: a fixed
// output shape known when the graph is built, and a computation into a given output.
type kernOp interface {
	G.Op
	outShape() tensor.Shape
	exec(dt tensor.Dtype, in []G.Value, out *tensor.Dense) error
}

// kernBase carries the parts of gorgonia's Op interface that are the same for all kernel ops,
// and the output tensor the op reuses across runs.
type kernBase struct {
	name  string // "ops.Conv2d", ...
	id    int64  // NextID: an op instance owns buffers, so it is never merged with another
	out   kernOut
	arity int
	shape tensor.Shape // the output shape, cached from outShape on first use
}

// outShapeOf returns k's output shape, computed once.
func (b *kernBase) outShapeOf(k kernOp) tensor.Shape {
	if b.shape == nil {
		b.shape = k.outShape().Clone()
	}
	return b.shape
}

func newKernBase(name string, arity int) kernBase {
	return kernBase{name: name, id: NextID(), arity: arity}
}

// Arity is the number of inputs.
func (b *kernBase) Arity() int { return b.arity }

// ReturnsPtr is false: the output never aliases an input.
func (b *kernBase) ReturnsPtr() bool { return false }

// CallsExtern is false so that gorgonia's compiler does not insert a per-run allocation of
// the output; the op reuses its own output tensor instead (see UsePreallocDo).
func (b *kernBase) CallsExtern() bool { return false }

// OverwritesInput is -1: inputs are never overwritten.
func (b *kernBase) OverwritesInput() int { return -1 }

// kernDtype checks that every input is a dense float tensor of one dtype and returns it.
func kernDtype(op string, in []G.Value) (tensor.Dtype, error) {
	var dt tensor.Dtype
	for i, v := range in {
		d, err := Dense(op, v)
		if err != nil {
			return dt, fmt.Errorf("input %d: %w", i, err)
		}
		if i == 0 {
			dt = d.Dtype()
		} else if d.Dtype() != dt {
			return dt, fmt.Errorf("%s: input %d has dtype %v, input 0 has %v", op, i, d.Dtype(), dt)
		}
	}
	return dt, nil
}

// kernDo runs k into its own reusable output tensor.
func kernDo(k kernOp, b *kernBase, in []G.Value) (G.Value, error) {
	if len(in) != b.arity {
		return nil, fmt.Errorf("%s: %d inputs, want %d", b.name, len(in), b.arity)
	}
	dt, err := kernDtype(b.name, in)
	if err != nil {
		return nil, err
	}
	out, err := b.out.get(dt, b.outShapeOf(k))
	if err != nil {
		return nil, fmt.Errorf("%s: output %v: %w", b.name, b.outShapeOf(k), err)
	}
	if err := k.exec(dt, in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// kernPrealloc is UsePreallocDo for every kernel op: it deliberately ignores the machine's
// register value p and runs into the op's own reused output. A tape machine hands an op the
// value last written to its register, and that value can share memory with a value that is
// still live (ops that return pointers, such as gorgonia's Reshape, alias their input), so
// writing into it could corrupt another node; the op's own tensor is never shared that way
// and is reused across runs just the same.
func kernPrealloc(k kernOp, b *kernBase, _ G.Value, in []G.Value) (G.Value, error) {
	return kernDo(k, b, in)
}

// kernHash writes the op's name, instance id and parameters.
func kernHash(h hash.Hash, b *kernBase, params any) {
	fmt.Fprintf(h, "%s#%d%v", b.name, b.id, params)
}

// kernCheckFloat checks that every node has a float dtype, all the same.
func kernCheckFloat(op string, nodes ...*G.Node) error {
	var dt tensor.Dtype
	for i, n := range nodes {
		if n == nil {
			return fmt.Errorf("%s: input %d is nil", op, i)
		}
		t := n.Dtype()
		if t != tensor.Float32 && t != tensor.Float64 {
			return fmt.Errorf("%s: %s has dtype %v (want float32 or float64)", op, n.Name(), t)
		}
		if i == 0 {
			dt = t
		} else if t != dt {
			return fmt.Errorf("%s: %s has dtype %v, %s has %v", op, n.Name(), t, nodes[0].Name(), dt)
		}
	}
	return nil
}
