package ddp

import (
	"context"
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Raw is DDP for graphs written directly with gorgonia: the caller's own learnable nodes,
// G.Grad and a TapeMachine, without package nn. NewRaw moves the learnables' values into a
// flat parameter buffer (the nodes are rebound to views of it, so the graph reads the
// buffer) with a flat gradient buffer beside it; Params exposes both, and the caller's
// update rule (or package optim) steps on them.
//
// With taps (wrap each learnable with Tap when building the forward), gradients are
// reduced in buckets while backward runs. Without taps, Run copies the gradients after the
// tape and reduces them then, with no overlap.
type Raw struct {
	*DDP
	nodes  []*G.Node
	byNode map[*G.Node]*nn.Param
}

// NewRaw wraps the float32 learnables (nodes without an op, holding a value) of this rank's
// graph. Their names (or "param<i>" when unnamed) and shapes are checked across ranks, and
// rank 0's values broadcast, as New does. Call it before building the forward with Tap.
func NewRaw(ctx context.Context, g comm.Group, learnables []*G.Node, opts ...Option) (*Raw, error) {
	params := make([]*nn.Param, len(learnables))
	for i, n := range learnables {
		name := n.Name()
		if name == "" {
			name = fmt.Sprintf("param%d", i)
		}
		if n.Dtype() != tensor.Float32 || n.Value() == nil {
			return nil, fmt.Errorf("ddp: rank %d: learnable %s: want a float32 node with a value, got %v", g.Rank(), name, n.Dtype())
		}
		params[i] = &nn.Param{Name: name, Shape: []int(n.Shape().Clone())}
	}
	ps, err := nn.NewParamSet(nil, params, nil)
	if err != nil {
		return nil, fmt.Errorf("ddp: rank %d: %w", g.Rank(), err)
	}
	r := &Raw{nodes: learnables, byNode: map[*G.Node]*nn.Param{}}
	for i, n := range learnables {
		p := params[i]
		src, ok := n.Value().Data().([]float32)
		if !ok || len(src) != len(p.Data) {
			return nil, fmt.Errorf("ddp: rank %d: learnable %s: value is %T, want %d float32", g.Rank(), p.Name, n.Value().Data(), len(p.Data))
		}
		copy(p.Data, src)
		if err := G.Let(n, tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(p.Data))); err != nil {
			return nil, fmt.Errorf("ddp: rank %d: rebinding %s to the flat buffer: %w", g.Rank(), p.Name, err)
		}
		r.byNode[n] = p
	}
	if r.DDP, err = New(ctx, &nn.Model{Params: ps}, g, opts...); err != nil {
		return nil, err
	}
	return r, nil
}

// Params returns the flat parameters: Params().Data holds the values the graph reads and
// Params().Grad the reduced gradients, Params().Params[i] belongs to learnables[i].
func (r *Raw) Params() *nn.ParamSet { return r.Model.Params }

// ZeroGrad clears the gradient buffer (gradients accumulate, as in PyTorch).
func (r *Raw) ZeroGrad() { r.Model.Params.ZeroGrad() }

// Tap returns the node the forward should use in place of the learnable w: its gradient is
// added to the flat gradient buffer as soon as the tape computes it, and a full bucket
// starts its reduction at once.
func (r *Raw) Tap(w *G.Node) (*G.Node, error) {
	p, ok := r.byNode[w]
	if !ok {
		return nil, fmt.Errorf("ddp: rank %d: %s is not one of the wrapped learnables", r.rank, w.Name())
	}
	return nn.Tap(w, func(v G.Value) error {
		if err := accumulate(p, v); err != nil {
			return err
		}
		return r.onGrad(p)
	})
}

// Run runs one step: run (typically the machine's RunAll) computes forward and backward.
// With taps, pass grads nil. Without taps, pass the gradient nodes returned by G.Grad, in
// the order of the learnables: they are added to the flat buffer after the tape and reduced
// then. On return Params().Grad holds the average over ranks.
func (r *Raw) Run(ctx context.Context, run func() error, grads G.Nodes) error {
	if grads != nil && len(grads) != len(r.nodes) {
		return fmt.Errorf("ddp: rank %d: %d gradients for %d learnables", r.rank, len(grads), len(r.nodes))
	}
	if r.join != nil {
		if _, err := r.join.handshake(ctx, r.DDP, !r.noSync); err != nil {
			return err
		}
	}
	r.beginStep(ctx, !r.noSync)
	err := run()
	if err == nil && grads != nil {
		// Last learnable first: the buffer's (roughly backward) order, so buckets fill in order.
		for i := len(grads) - 1; i >= 0; i-- {
			p := r.Model.Params.Params[i]
			if err = accumulate(p, grads[i].Value()); err != nil {
				break
			}
			if err = r.onGrad(p); err != nil {
				break
			}
		}
	}
	return r.finish(ctx, err, nil)
}

func accumulate(p *nn.Param, v G.Value) error {
	if v == nil {
		return fmt.Errorf("ddp: gradient of %s has no value", p.Name)
	}
	g, ok := v.Data().([]float32)
	if !ok || len(g) != len(p.Grad) {
		return fmt.Errorf("ddp: gradient of %s: got %T, want %d float32", p.Name, v.Data(), len(p.Grad))
	}
	for i, x := range g {
		p.Grad[i] += x
	}
	return nil
}
