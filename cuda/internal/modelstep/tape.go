package modelstep

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
)

// Tape owns the tensors of one step: activations, saved statistics and gradients, all freed
// (returned to the device's cache) when the step ends (Release). The first allocation error
// sticks in Err.
type Tape struct {
	D     *cuda.Device
	Train bool // training mode (a step with a backward pass), not evaluation
	Err   error
	ts    []*cuda.Tensor
	free  []func()
}

// Alloc allocates a tensor owned by the tape; after an error it does nothing and returns nil.
func (t *Tape) Alloc(dt cuda.DType, shape ...int) *cuda.Tensor {
	if t.Err != nil {
		return nil
	}
	x, err := t.D.Alloc(dt, shape...)
	if err != nil {
		t.Err = err
		return nil
	}
	t.ts = append(t.ts, x)
	return x
}

// View reshapes (offset 0) or slices x; a failure sticks like an allocation's.
func (t *Tape) View(x *cuda.Tensor, offset int, shape ...int) *cuda.Tensor {
	if t.Err != nil || x == nil {
		return nil
	}
	v, err := x.View(offset, shape...)
	if err != nil {
		t.Err = err
		return nil
	}
	return v
}

// Upload copies x to the device as a tensor owned by the tape.
func (t *Tape) Upload(x []float32, shape ...int) (*cuda.Tensor, error) {
	in, err := t.D.FromHost(x, shape...)
	if err != nil {
		return nil, err
	}
	t.Keep(in)
	return in, nil
}

// Keep hands tensors to the tape, to be freed with it.
func (t *Tape) Keep(xs ...*cuda.Tensor) { t.ts = append(t.ts, xs...) }

// OnRelease registers f to run on Release (freeing saved statistics).
func (t *Tape) OnRelease(f func()) { t.free = append(t.free, f) }

// Release frees the tape's tensors and runs the functions registered with OnRelease.
func (t *Tape) Release() {
	for _, x := range t.ts {
		x.Free()
	}
	for _, f := range t.free {
		f()
	}
	t.ts, t.free = nil, nil
}

// UploadLabels copies class labels to the device as an Int32 tensor owned by the tape.
func (t *Tape) UploadLabels(labels []int32) (*cuda.Tensor, error) {
	lab, err := t.D.FromHostInt32(labels, len(labels))
	if err != nil {
		return nil, err
	}
	t.Keep(lab)
	return lab, nil
}

// Pointwise applies an elementwise activation, f(y, x), whose backward is df(dx, dy, x)
// (cuda.Device's ReLU and ReLUBackward, GELU and GELUBackward).
func Pointwise(t *Tape, x *cuda.Tensor, f func(y, x *cuda.Tensor) error, df func(dx, dy, x *cuda.Tensor) error) (*cuda.Tensor, BackFn, error) {
	y := t.Alloc(cuda.Float32, x.Shape()...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := f(y, x); err != nil {
		return nil, nil, err
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, df(dx, dy, x)
	}, nil
}

// LossStep ends a training step: the cross-entropy of logits [N, classes] against the labels
// lab, its gradient (the mean's, 1/N per sample) run back through back, then the mean loss
// and, when withLogits, the logits copied to the host. pkg prefixes the errors.
func (t *Tape) LossStep(ctx context.Context, pkg string, logits, lab *cuda.Tensor, back BackFn, withLogits bool) (float32, []float32, error) {
	n := logits.Shape()[0]
	loss := t.Alloc(cuda.Float32, n)
	dlogits := t.Alloc(cuda.Float32, logits.Shape()...)
	if t.Err != nil {
		return 0, nil, t.Err
	}
	prob, err := t.D.CrossEntropy(loss, logits, lab)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: loss on logits %v: %w", pkg, logits.Shape(), err)
	}
	t.Keep(prob)
	if err := t.D.CrossEntropyBackward(dlogits, prob, lab, 1/float32(n)); err != nil {
		return 0, nil, fmt.Errorf("%s: loss backward: %w", pkg, err)
	}
	if _, err := back(dlogits); err != nil {
		return 0, nil, err
	}
	return readLoss(ctx, loss, logits, withLogits)
}

// readLoss waits for the per-sample losses [N] and returns their mean and, when withLogits,
// the logits.
func readLoss(ctx context.Context, loss, logits *cuda.Tensor, withLogits bool) (float32, []float32, error) {
	ls, err := loss.ToHost(ctx)
	if err != nil {
		return 0, nil, err
	}
	var mean float32
	for _, v := range ls {
		mean += v / float32(len(ls))
	}
	if !withLogits {
		return mean, nil, nil
	}
	out, err := logits.ToHost(ctx)
	if err != nil {
		return 0, nil, err
	}
	return mean, out, nil
}

// Backward returns the backward of layers run in order, given their backward functions:
// those run in reverse, stopping where a gradient is nil (an input that needs none).
func Backward(backs []BackFn) BackFn {
	return func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		var err error
		for i := len(backs) - 1; i >= 0 && dy != nil; i-- {
			if dy, err = backs[i](dy); err != nil {
				return nil, err
			}
		}
		return dy, nil
	}
}
