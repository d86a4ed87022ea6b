package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
)

// backFn maps the gradient of a layer's output to the gradient of its input (nil for the
// patch embedding, whose input needs none), writing its parameters' gradients on the way.
type backFn func(dy *cuda.Tensor) (*cuda.Tensor, error)

// tape owns the tensors of one step: activations, saved statistics and gradients, all freed
// (returned to the device's cache) when the step ends. The first allocation error sticks.
type tape struct {
	d     *cuda.Device
	train bool // training mode: stochastic depth is drawn and applied
	ts    []*cuda.Tensor
	free  []func()
	err   error
}

func (t *tape) alloc(dt cuda.DType, shape ...int) *cuda.Tensor {
	if t.err != nil {
		return nil
	}
	x, err := t.d.Alloc(dt, shape...)
	if err != nil {
		t.err = err
		return nil
	}
	t.ts = append(t.ts, x)
	return x
}

// view reshapes (offset 0) or slices x; a failure sticks like an allocation's.
func (t *tape) view(x *cuda.Tensor, offset int, shape ...int) *cuda.Tensor {
	if t.err != nil || x == nil {
		return nil
	}
	v, err := x.View(offset, shape...)
	if err != nil {
		t.err = err
		return nil
	}
	return v
}

func (t *tape) upload(x []float32, shape ...int) (*cuda.Tensor, error) {
	in, err := t.d.FromHost(x, shape...)
	if err != nil {
		return nil, fmt.Errorf("gpuswin: input %v: %w", shape, err)
	}
	t.keep(in)
	return in, nil
}

func (t *tape) keep(xs ...*cuda.Tensor) { t.ts = append(t.ts, xs...) }

func (t *tape) release() {
	for _, x := range t.ts {
		x.Free()
	}
	for _, f := range t.free {
		f()
	}
	t.ts, t.free = nil, nil
}

// do runs device operations in order and stops at the first error.
func do(fs ...func() error) error {
	for _, f := range fs {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// layer is one step of a chain: a forward that returns its output and backward.
type layer func(x *cuda.Tensor) (*cuda.Tensor, backFn, error)

// chain runs layers in order; the backward runs theirs in reverse, stopping where a
// gradient is nil (the patch embedding's input).
func chain(x *cuda.Tensor, ls ...layer) (*cuda.Tensor, backFn, error) {
	backs := make([]backFn, 0, len(ls))
	for _, l := range ls {
		y, b, err := l(x)
		if err != nil {
			return nil, nil, err
		}
		backs = append(backs, b)
		x = y
	}
	return x, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		var err error
		for i := len(backs) - 1; i >= 0 && dy != nil; i-- {
			if dy, err = backs[i](dy); err != nil {
				return nil, err
			}
		}
		return dy, nil
	}, nil
}

func (s *Swin) param(name string) (*cuda.Tensor, error) {
	p, ok := s.params[name]
	if !ok {
		return nil, fmt.Errorf("gpuswin: no parameter %s", name)
	}
	return p, nil
}

// linear is y = x·Wᵀ + b on rows x [rows, in], W [out, in] (torch.nn.Linear).
func (s *Swin) linear(t *tape, x *cuda.Tensor, name string, bias bool) (*cuda.Tensor, backFn, error) {
	w, err := s.param(name + ".weight")
	if err != nil {
		return nil, nil, err
	}
	var b *cuda.Tensor
	if bias {
		if b, err = s.param(name + ".bias"); err != nil {
			return nil, nil, err
		}
	}
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 2 || xs[1] != ws[1] {
		return nil, nil, fmt.Errorf("gpuswin: %s (weight %v): input %v, want [rows, %d]", name, ws, xs, ws[1])
	}
	y := t.alloc(cuda.Float32, xs[0], ws[0])
	if t.err != nil {
		return nil, nil, t.err
	}
	if err := do(func() error { return s.d.MatMul(y, x, w, false, true, 1, 0) }, func() error {
		if b == nil {
			return nil
		}
		return s.d.AddBias(y, b)
	}); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s: %w", name, err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.alloc(cuda.Float32, xs...)
		if t.err != nil {
			return nil, t.err
		}
		err := do(func() error { return s.d.MatMul(dx, dy, w, false, false, 1, 0) },
			func() error { return s.d.MatMul(s.grads[name+".weight"], dy, x, true, false, 1, 0) },
			func() error {
				if b == nil {
					return nil
				}
				return s.d.SumCols(s.grads[name+".bias"], dy)
			})
		if err != nil {
			return nil, fmt.Errorf("gpuswin: %s backward: %w", name, err)
		}
		return dx, nil
	}, nil
}

// layerNorm normalises rows x [rows, C] (eps 1e-5, as nn.LayerNorm's default).
func (s *Swin) layerNorm(t *tape, x *cuda.Tensor, name string) (*cuda.Tensor, backFn, error) {
	const eps = 1e-5
	g, err := s.param(name + ".weight")
	if err != nil {
		return nil, nil, err
	}
	b, err := s.param(name + ".bias")
	if err != nil {
		return nil, nil, err
	}
	y := t.alloc(cuda.Float32, x.Shape()...)
	if t.err != nil {
		return nil, nil, t.err
	}
	saved, err := s.d.LayerNorm(y, x, g, b, eps)
	if err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s (weight %v) on %v: %w", name, g.Shape(), x.Shape(), err)
	}
	t.free = append(t.free, saved.Free)
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.alloc(cuda.Float32, x.Shape()...)
		if t.err != nil {
			return nil, t.err
		}
		if err := s.d.LayerNormBackward(dx, s.grads[name+".weight"], s.grads[name+".bias"], dy, x, g, saved); err != nil {
			return nil, fmt.Errorf("gpuswin: %s backward: %w", name, err)
		}
		return dx, nil
	}, nil
}

func (s *Swin) gelu(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	y := t.alloc(cuda.Float32, x.Shape()...)
	if t.err != nil {
		return nil, nil, t.err
	}
	if err := s.d.GELU(y, x); err != nil {
		return nil, nil, err
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.alloc(cuda.Float32, x.Shape()...)
		if t.err != nil {
			return nil, t.err
		}
		return dx, s.d.GELUBackward(dx, dy, x)
	}, nil
}

// gather is a row gather through a cached index; its backward scatter-adds into zeros.
func (s *Swin) gather(t *tape, x *cuda.Tensor, idx *cuda.Tensor, rowLen int, what string, shape ...int) (*cuda.Tensor, backFn, error) {
	y := t.alloc(cuda.Float32, shape...)
	if t.err != nil {
		return nil, nil, t.err
	}
	if err := s.d.GatherRows(y, x, idx, rowLen); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s %v -> %v: %w", what, x.Shape(), shape, err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.alloc(cuda.Float32, x.Shape()...)
		if t.err != nil {
			return nil, t.err
		}
		if err := do(func() error { return s.d.Fill(dx, 0) }, func() error { return s.d.ScatterAddRows(dx, dy, idx, rowLen) }); err != nil {
			return nil, fmt.Errorf("gpuswin: %s backward: %w", what, err)
		}
		return dx, nil
	}, nil
}

// permute is x.permute(perm) of x viewed as in (contiguous), returned with shape out; its
// backward applies the inverse permutation.
func (s *Swin) permute(t *tape, x *cuda.Tensor, in []int, perm []int, out []int) (*cuda.Tensor, backFn, error) {
	ps := make([]int, len(perm))
	inv := make([]int, len(perm))
	for o, p := range perm {
		ps[o] = in[p]
		inv[p] = o
	}
	y := t.alloc(cuda.Float32, out...)
	xv, yv := t.view(x, 0, in...), t.view(y, 0, ps...)
	if t.err != nil {
		return nil, nil, t.err
	}
	if err := s.d.Permute(yv, xv, perm...); err != nil {
		return nil, nil, err
	}
	xs := x.Shape()
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.alloc(cuda.Float32, xs...)
		dyv, dxv := t.view(dy, 0, ps...), t.view(dx, 0, in...)
		if t.err != nil {
			return nil, t.err
		}
		return dx, s.d.Permute(dxv, dyv, inv...)
	}, nil
}
