// Package gpuswin runs a torchvision Swin Transformer v1's training step (models/swin:
// swin_t, swin_s, swin_b and smaller configurations) on a GPU with the cuda package's ops,
// driven by the model's configuration, with one gradient per named parameter copied into the
// layout of the model's flat gradient buffer (nn.ParamSet.Grad), as cuda/gpuresnet does.
//
// It computes what models/swin computes: the 4x4 stride-4 patch embedding and its LayerNorm;
// window attention with the relative-position bias gathered through each block's
// relative_position_index buffer; shifted windows with torchvision's attention mask; zero
// padding of maps that are not window multiples (and the rule that a window covering the
// padded map does not shift); PatchMerging with padding to even sizes; the GELU MLP;
// stochastic depth; the final LayerNorm, average pool, head and cross-entropy. Window
// partition, cyclic shift, padding, reverse and cropping are each one row gather
// (cuda.GatherRows) whose backward is the scatter-add.
//
// Stochastic depth in training draws from the model's counter-based RNG (nn.Model.RNG)
// exactly as the CPU op does: one stream per DropPath with a non-zero probability, in
// forward order, and the same per-sample keep decision, so a step on the GPU and one on the
// CPU from the same RNG state drop the same samples, and the RNG advances as a CPU step
// advances it. (A frozen RNG, ops.RNG.Freeze, is not honoured: the step always advances.)
//
// Limits: float32 only (no autocast); gradients are for a training-mode step (Eval gives
// logits only).
package gpuswin

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/internal/modelstep"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Swin is a Swin Transformer's parameters and gradients on one device.
type Swin struct {
	st   *modelstep.State
	cfg  swin.Config
	drop []float64 // stochastic-depth probability of each block, in order
	rng  *ops.RNG
	rel  map[string]*cuda.Tensor // Int32 relative_position_index of each attention layer
	geom map[geomKey]*cuda.Tensor
}

// New uploads m's parameters and relative-position index buffers to d. m.Root must be a
// *swin.Swin.
func New(d *cuda.Device, m *nn.Model) (*Swin, error) {
	root, ok := m.Root.(*swin.Swin)
	if !ok {
		return nil, fmt.Errorf("gpuswin: model root is %T, want *swin.Swin", m.Root)
	}
	s := &Swin{st: modelstep.NewState("gpuswin", d, m.Params), cfg: root.Config(), drop: root.DropPathProbs(), rng: m.RNG,
		rel: map[string]*cuda.Tensor{}, geom: map[geomKey]*cuda.Tensor{}}
	if err := s.st.Upload(); err != nil {
		s.Free()
		return nil, err
	}
	for _, b := range m.Params.Buffers {
		if b.Int64 == nil {
			continue
		}
		idx, err := s.uploadIndex(b)
		if err != nil {
			s.Free()
			return nil, err
		}
		s.rel[b.Name] = idx
	}
	return s, nil
}

// uploadIndex checks a relative_position_index buffer against its bias table, as the CPU
// op does, and uploads it as Int32.
func (s *Swin) uploadIndex(b *nn.Buffer) (*cuda.Tensor, error) {
	const suffix = "relative_position_index"
	if len(b.Name) < len(suffix) || b.Name[len(b.Name)-len(suffix):] != suffix {
		return nil, fmt.Errorf("gpuswin: unexpected int64 buffer %s", b.Name)
	}
	table := s.st.PS.Param(b.Name[:len(b.Name)-len(suffix)] + "relative_position_bias_table")
	if table == nil || len(table.Shape) != 2 {
		return nil, fmt.Errorf("gpuswin: %s has no bias table beside it", b.Name)
	}
	v := make([]int32, len(b.Int64))
	for i, j := range b.Int64 {
		if j < 0 || j >= int64(table.Shape[0]) {
			return nil, fmt.Errorf("gpuswin: %s[%d] = %d is outside the bias table %v", b.Name, i, j, table.Shape)
		}
		v[i] = int32(j)
	}
	t, err := s.st.Dev.FromHostInt32(v, len(v))
	if err != nil {
		return nil, fmt.Errorf("gpuswin: uploading %s: %w", b.Name, err)
	}
	return t, nil
}

// Free releases the device tensors.
func (s *Swin) Free() {
	s.st.Free()
	modelstep.FreeAll(s.rel)
	modelstep.FreeAll(s.geom)
}

// Result is what a step returns to the host.
type Result struct {
	// Loss is the mean cross-entropy of the batch.
	Loss float32
	// Logits [N, classes], when the step was asked for them.
	Logits []float32
}

// Step runs a training-mode forward and backward on images x (NCHW float32, shape
// [N,3,H,W]) with class labels, leaving the gradients on the device (see Grads, SGD). It
// waits for the device to return the loss. withLogits also copies the logits back.
func (s *Swin) Step(ctx context.Context, x []float32, shape []int, labels []int32, withLogits bool) (*Result, error) {
	if len(shape) != 4 || len(labels) != shape[0] {
		return nil, fmt.Errorf("gpuswin: input %v with %d labels", shape, len(labels))
	}
	d := s.st.Dev
	t := &tape{D: d, Train: true}
	defer t.Release()
	in, err := upload(t, x, shape)
	if err != nil {
		return nil, err
	}
	lab, err := t.UploadLabels(labels)
	if err != nil {
		return nil, err
	}
	logits, back, err := s.forward(t, in)
	if err != nil {
		return nil, err
	}
	mean, out, err := t.LossStep(ctx, "gpuswin", logits, lab, back, withLogits)
	if err != nil {
		return nil, err
	}
	return &Result{Loss: mean, Logits: out}, nil
}

// Eval runs the forward pass in evaluation mode (no stochastic depth) on images x
// [N,3,H,W] and returns the logits [N, classes].
func (s *Swin) Eval(ctx context.Context, x []float32, shape []int) ([]float32, error) {
	if len(shape) != 4 {
		return nil, fmt.Errorf("gpuswin: input %v, want [N,3,H,W]", shape)
	}
	t := &tape{D: s.st.Dev}
	defer t.Release()
	in, err := upload(t, x, shape)
	if err != nil {
		return nil, err
	}
	logits, _, err := s.forward(t, in)
	if err != nil {
		return nil, err
	}
	return logits.ToHost(ctx)
}

// SetParams uploads the model's parameters again (after an optimizer stepped them on the
// host, e.g. under DDP with a host-side optimizer).
func (s *Swin) SetParams() error { return s.st.SetParams() }

// Grads copies the gradients into grad, laid out as the model's nn.ParamSet.Grad.
func (s *Swin) Grads(ctx context.Context, grad []float32) error { return s.st.Grads(ctx, grad) }

// SGD updates the parameters on the device as torch.optim.SGD with momentum (no weight
// decay): buf = momentum*buf + grad; param -= lr*buf.
func (s *Swin) SGD(lr, momentum float32) error { return s.st.SGD(lr, momentum) }
