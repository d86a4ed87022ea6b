package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"
)

// CastPolicy is an autocast policy (package amp provides PyTorch's): it decides, per module,
// in which precision the lower-precision ops (convolution, linear, batched matmul) compute,
// by rewriting their inputs and output. Ops on the float32 list (softmax, norms, losses,
// reductions) are never passed to it and stay float32.
type CastPolicy interface {
	// CastInput returns the node a lower-precision op of module path uses for input n
	// (for example n rounded to bfloat16), or n itself where the policy is off.
	CastInput(b *Builder, path string, n *G.Node) (*G.Node, error)
	// CastOutput does the same for the op's output.
	CastOutput(b *Builder, path string, n *G.Node) (*G.Node, error)
}

// WithAutocast applies policy to every lower-precision op of the graph.
func WithAutocast(policy CastPolicy) BuildOption { return func(c *buildConfig) { c.cast = policy } }

// Autocast rewrites the inputs of a lower-precision op of module path under the graph's
// autocast policy; without a policy it returns them unchanged. nil inputs (an absent bias)
// stay nil. Layers and user ops on the lower-precision list call it before the op and
// AutocastOutput after it.
func (b *Builder) Autocast(path string, in ...*G.Node) ([]*G.Node, error) {
	if b.cfg.cast == nil {
		return in, nil
	}
	out := make([]*G.Node, len(in))
	for i, n := range in {
		if n == nil {
			continue
		}
		c, err := b.cfg.cast.CastInput(b, path, n)
		if err != nil {
			return nil, fmt.Errorf("nn: autocast %s: %w", path, err)
		}
		out[i] = c
		b.marks.markIn(c)
	}
	return out, nil
}

// AutocastOutput rewrites the output of a lower-precision op under the autocast policy.
func (b *Builder) AutocastOutput(path string, n *G.Node) (*G.Node, error) {
	if b.cfg.cast == nil || n == nil {
		return n, nil
	}
	b.marks.markDecided(n)
	c, err := b.cfg.cast.CastOutput(b, path, n)
	if err != nil {
		return nil, fmt.Errorf("nn: autocast %s: %w", path, err)
	}
	return c, nil
}
