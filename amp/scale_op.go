package amp

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ScaleLoss returns loss multiplied by the scaler's current scale: differentiate it instead
// of loss (return it from the nn.BuildFunc) and every gradient comes out multiplied by the
// scale. The op reads the scale when it runs, so the graph is built once and follows every
// Update; its backward multiplies the incoming gradient by the same scale. loss must be a
// float32 or float64 scalar node; b is the builder of its graph (unused today, it fixes the
// signature for a GPU scale that lives in device memory).
func (s *GradScaler) ScaleLoss(b *nn.Builder, loss *G.Node) (*G.Node, error) {
	_ = b
	if loss == nil {
		return nil, fmt.Errorf("amp: scale loss: nil loss node")
	}
	if !loss.IsScalar() {
		return nil, fmt.Errorf("amp: scale loss: loss %s has shape %v, want a scalar", loss.Name(), loss.Shape())
	}
	dt, err := nodeDtype(loss)
	if err != nil || (dt != tensor.Float32 && dt != tensor.Float64) {
		return nil, fmt.Errorf("amp: scale loss: loss %s has type %v, want a float32 or float64 scalar", loss.Name(), loss.Type())
	}
	y, err := G.ApplyOp(&lossScaleOp{id: ops.NextID(), s: s}, loss)
	if err != nil {
		return nil, fmt.Errorf("amp: scale loss: %w", err)
	}
	return y, nil
}

// lossScaleOp multiplies a scalar by the scaler's scale at run time (forward and backward).
type lossScaleOp struct {
	id  int64
	s   *GradScaler
	f32 G.F32
	f64 G.F64
}

func (op *lossScaleOp) Arity() int { return 1 }
func (op *lossScaleOp) Type() hm.Type {
	return hm.NewFnType(hm.TypeVariable('a'), hm.TypeVariable('a'))
}
func (op *lossScaleOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (op *lossScaleOp) ReturnsPtr() bool      { return false }
func (op *lossScaleOp) CallsExtern() bool     { return false }
func (op *lossScaleOp) OverwritesInput() int  { return -1 }
func (op *lossScaleOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "gp.amp.LossScale#%d", op.id) }
func (op *lossScaleOp) Hashcode() uint32      { return ops.HashOf(op) }
func (op *lossScaleOp) String() string        { return fmt.Sprintf("LossScale#%d", op.id) }
func (op *lossScaleOp) DiffWRT(int) []bool    { return []bool{true} }

func (op *lossScaleOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("LossScale: got %d inputs, want 1", len(in))
	}
	// float32 product, as PyTorch's loss * scale on float32 tensors.
	switch v := in[0].(type) {
	case *G.F32:
		op.f32 = G.F32(float32(*v) * op.s.scale)
		return &op.f32, nil
	case *G.F64:
		op.f64 = G.F64(float64(*v) * float64(op.s.scale))
		return &op.f64, nil
	case *tensor.Dense:
		if v.Shape().TotalSize() == 1 {
			switch d := v.Data().(type) {
			case []float32:
				op.f32 = G.F32(d[0] * op.s.scale)
				return &op.f32, nil
			case []float64:
				op.f64 = G.F64(d[0] * float64(op.s.scale))
				return &op.f64, nil
			}
		}
	}
	return nil, fmt.Errorf("LossScale: expected a float scalar, got %T", in[0])
}

// SymDiff: d(loss·scale)/d loss = scale, so the gradient is the incoming one times the scale.
func (op *lossScaleOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(&lossScaleOp{id: ops.NextID(), s: op.s}, grad)
	if err != nil {
		return nil, fmt.Errorf("LossScale backward: %w", err)
	}
	return G.Nodes{dx}, nil
}
