package models

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Outputs is what one run of a model on fixed inputs produced.
type Outputs struct {
	// Logits [N, classes], row-major, and its shape.
	Logits []float32
	Shape  []int
	// Loss is the mean cross-entropy against the labels (when labels were given).
	Loss float32
	// Grads holds d loss / d parameter for every parameter, keyed by parameter name, in
	// registration order (when labels were given).
	Grads []nn.StateEntry
	// Buffers is the model's buffers after the run (BatchNorm statistics move in train mode).
	Buffers []nn.StateEntry
}

// Run builds m into a program for images of the given shape [N, 3, H, W], runs it once on
// x (and labels, class indices as floats, when not nil) in train or eval mode, and returns
// copies of the logits, loss, gradients and buffers. In train mode the running statistics
// of the model's BatchNorm layers are updated, as one PyTorch forward in train mode does.
func Run(m *nn.Model, x []float32, shape []int, labels []float32, train bool) (*Outputs, error) {
	if len(shape) != 4 {
		return nil, fmt.Errorf("models: input shape %v, want [N, 3, H, W]", shape)
	}
	if labels != nil && len(labels) != shape[0] {
		return nil, fmt.Errorf("models: %d labels for a batch of %d", len(labels), shape[0])
	}
	var evalGrads map[string]*G.Node
	build := func(b *nn.Builder) (*G.Node, error) {
		in, err := b.Input("images", shape...)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(in)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		if labels == nil {
			return nil, nil
		}
		y, err := b.Input("labels", shape[0])
		if err != nil {
			return nil, err
		}
		loss, err := ops.CrossEntropy(logits, y, 0)
		if err != nil {
			return nil, fmt.Errorf("models: loss on logits %v: %w", logits.Shape(), err)
		}
		b.Output("loss", loss)
		if train {
			return loss, nil
		}
		// Eval programs compute no gradients; differentiate here, against the leaves.
		used := b.UsedParams()
		leaves := make(G.Nodes, len(used))
		for i, p := range used {
			leaves[i] = b.Leaf(p)
		}
		grads, err := G.Grad(loss, leaves...)
		if err != nil {
			return nil, fmt.Errorf("models: eval-mode gradients: %w", err)
		}
		evalGrads = map[string]*G.Node{}
		for i, p := range used {
			evalGrads[p.Name] = grads[i]
			b.Output("grad:"+p.Name, grads[i])
		}
		return nil, nil
	}
	prog, err := nn.Compile(m, build, nn.Training(train))
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	if err := prog.SetInput("images", x); err != nil {
		return nil, err
	}
	if labels != nil {
		if err := prog.SetInput("labels", labels); err != nil {
			return nil, err
		}
	}
	m.Params.ZeroGrad()
	if err := prog.Run(context.Background()); err != nil {
		return nil, err
	}
	out := &Outputs{}
	logits, err := prog.Output("logits")
	if err != nil {
		return nil, err
	}
	out.Logits = append([]float32(nil), logits...)
	out.Shape = []int{shape[0], len(logits) / shape[0]}
	if labels != nil {
		l, err := prog.Output("loss")
		if err != nil {
			return nil, err
		}
		out.Loss = l[0]
		for _, p := range m.Params.Params {
			g := make([]float32, len(p.Data))
			if train {
				copy(g, p.Grad)
			} else if n := evalGrads[p.Name]; n != nil {
				v, err := prog.Output("grad:" + p.Name)
				if err != nil {
					return nil, err
				}
				copy(g, v)
			}
			out.Grads = append(out.Grads, nn.StateEntry{Name: p.Name, Shape: p.Shape, F32: g})
		}
	}
	for _, b := range m.Params.Buffers {
		e := nn.StateEntry{Name: b.Name, Shape: b.Shape}
		if b.Int64 != nil {
			e.I64 = append([]int64(nil), b.Int64...)
		} else {
			e.F32 = append([]float32(nil), b.Data...)
		}
		out.Buffers = append(out.Buffers, e)
	}
	return out, nil
}
