package nn

import (
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// engine is the tensor engine of a Program's machine: gorgonia's, with the float32
// elementwise Add into a given tensor (gorgonia's graph sums the gradients of a value that
// several ops read with it, in place or into the machine's buffer) run by simd.SumF32 (one
// pass, no cgo call) instead of the scalar loop. Each element is the same one rounding of
// a[i] + b[i] as before, so the bits are the same; every other case (a safe Add that
// allocates, WithIncr, views, broadcasting, other types, a result that is b's memory) is
// gorgonia's.
type engine struct{ G.StandardEngine }

// Add is tensor.Adder's Add: a + b into opts' reuse tensor, or into a with UseUnsafe.
func (e engine) Add(a, b tensor.Tensor, opts ...tensor.FuncOpt) (tensor.Tensor, error) {
	if out, ok := addFloat32(a, b, opts); ok {
		return out, nil
	}
	return e.StandardEngine.Add(a, b, opts...)
}

// addFloat32 is Add for contiguous float32 operands of one shape written into a, or into a
// reuse tensor of that shape that is a or shares no memory with a and b; it reports false,
// having done nothing, otherwise.
func addFloat32(a, b tensor.Tensor, opts []tensor.FuncOpt) (tensor.Tensor, bool) {
	fo := tensor.ParseFuncOpts(opts...)
	if fo.Incr() != nil || fo.Same() || fo.As().Type != nil {
		return nil, false
	}
	ad, bd := dense32(a), dense32(b)
	if ad == nil || bd == nil || !a.Shape().Eq(b.Shape()) {
		return nil, false
	}
	x, _ := ad.Data().([]float32)
	y, _ := bd.Data().([]float32)
	if len(x) != len(y) || len(x) == 0 || overlap(x, y) && &x[0] != &y[0] {
		return nil, false
	}
	o := x // UseUnsafe: into a
	switch {
	case fo.Reuse() != nil:
		rd := dense32(fo.Reuse())
		if rd == nil || !fo.Reuse().Shape().Eq(a.Shape()) {
			return nil, false
		}
		o, _ = rd.Data().([]float32)
		if len(o) != len(x) || &o[0] != &x[0] && (overlap(o, x) || overlap(o, y)) {
			return nil, false
		}
	case fo.Safe():
		return nil, false
	}
	for i := simd.SumF32(o, [][]float32{x, y}); i < len(o); i++ {
		o[i] = x[i] + y[i]
	}
	if fo.Reuse() != nil {
		return fo.Reuse(), true
	}
	return a, true
}

// dense32 is t as a contiguous float32 *tensor.Dense that owns its layout (not a view
// needing an iterator), or nil.
func dense32(t tensor.Tensor) *tensor.Dense {
	d, ok := t.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 || d.RequiresIterator() || d.IsView() || d.IsScalar() {
		return nil
	}
	return d
}

// overlap reports whether two non-empty slices share memory.
func overlap(p, q []float32) bool {
	at := func(s []float32, i int) uintptr { return uintptr(unsafe.Pointer(&s[i])) }
	return at(p, 0) <= at(q, len(q)-1) && at(q, 0) <= at(p, len(p)-1)
}
