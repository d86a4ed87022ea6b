package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/internal/modelstep"
)

// backFn maps the gradient of a layer's output to the gradient of its input (nil for the
// patch embedding, whose input needs none), writing its parameters' gradients on the way.
type backFn = modelstep.BackFn

// tape owns a step's tensors; Train marks a training step, in which stochastic depth is
// drawn and applied.
type tape = modelstep.Tape

// upload copies the input images to the device, owned by t.
func upload(t *tape, x []float32, shape []int) (*cuda.Tensor, error) {
	in, err := t.Upload(x, shape...)
	if err != nil {
		return nil, fmt.Errorf("gpuswin: input %v: %w", shape, err)
	}
	return in, nil
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
	return x, modelstep.Backward(backs), nil
}

func (s *Swin) param(name string) (*cuda.Tensor, error) {
	p, ok := s.st.Param[name]
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
	y := t.Alloc(cuda.Float32, xs[0], ws[0])
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := do(func() error { return s.st.Dev.MatMul(y, x, w, false, true, 1, 0) }, func() error {
		if b == nil {
			return nil
		}
		return s.st.Dev.AddBias(y, b)
	}); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s: %w", name, err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, xs...)
		if t.Err != nil {
			return nil, t.Err
		}
		err := do(func() error { return s.st.Dev.MatMul(dx, dy, w, false, false, 1, 0) },
			func() error { return s.st.Dev.MatMul(s.st.Grad[name+".weight"], dy, x, true, false, 1, 0) },
			func() error {
				if b == nil {
					return nil
				}
				return s.st.Dev.SumCols(s.st.Grad[name+".bias"], dy)
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
	y := t.Alloc(cuda.Float32, x.Shape()...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	saved, err := s.st.Dev.LayerNorm(y, x, g, b, eps)
	if err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s (weight %v) on %v: %w", name, g.Shape(), x.Shape(), err)
	}
	t.OnRelease(saved.Free)
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		if err := s.st.Dev.LayerNormBackward(dx, s.st.Grad[name+".weight"], s.st.Grad[name+".bias"], dy, x, g, saved); err != nil {
			return nil, fmt.Errorf("gpuswin: %s backward: %w", name, err)
		}
		return dx, nil
	}, nil
}

func (s *Swin) gelu(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	return modelstep.Pointwise(t, x, s.st.Dev.GELU, s.st.Dev.GELUBackward)
}

// gather is a row gather through a cached index; its backward scatter-adds into zeros.
func (s *Swin) gather(t *tape, x *cuda.Tensor, idx *cuda.Tensor, rowLen int, what string, shape ...int) (*cuda.Tensor, backFn, error) {
	y := t.Alloc(cuda.Float32, shape...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := s.st.Dev.GatherRows(y, x, idx, rowLen); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s %v -> %v: %w", what, x.Shape(), shape, err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		if err := do(func() error { return s.st.Dev.Fill(dx, 0) }, func() error { return s.st.Dev.ScatterAddRows(dx, dy, idx, rowLen) }); err != nil {
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
	y := t.Alloc(cuda.Float32, out...)
	xv, yv := t.View(x, 0, in...), t.View(y, 0, ps...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := s.st.Dev.Permute(yv, xv, perm...); err != nil {
		return nil, nil, err
	}
	xs := x.Shape()
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, xs...)
		dyv, dxv := t.View(dy, 0, ps...), t.View(dx, 0, in...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, s.st.Dev.Permute(dxv, dyv, inv...)
	}, nil
}
