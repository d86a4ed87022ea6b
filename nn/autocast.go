package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"
)

// CastPolicy is an autocast policy (package amp provides PyTorch's): it decides, per module,
// in which precision the lower-precision ops (convolution, linear, batched matmul) compute,
// by rewriting their inputs and output. Ops on the float32 list (softmax, norms, losses,
// reductions) are never passed to it and stay float32. gorgonia's own lower-precision ops
// in a build function are passed to it by Compile with the path "" (see WithAutocast),
// unless it has a method Enabled(path string) bool (as amp's Policy does) that is false
// for "": then Compile leaves them, and the graph, as they are.
type CastPolicy interface {
	// CastInput returns the node a lower-precision op of module path uses for input n
	// (for example n rounded to bfloat16), or n itself where the policy is off. A node
	// the policy returned, given again, comes back unchanged (no second cast).
	CastInput(b *Builder, path string, n *G.Node) (*G.Node, error)
	// CastOutput does the same for the op's output.
	CastOutput(b *Builder, path string, n *G.Node) (*G.Node, error)
}

// WithAutocast applies policy to every lower-precision op of the graph: the modules' ops
// (which call Builder.Autocast and AutocastOutput) and, with no marking by the build
// function, gorgonia's matrix products (G.Mul, G.BatchedMatMul, G.Tensordot, the product
// in G.Conv2d) and ops.Linear and ops.Conv2d used directly, which Compile casts by
// rewriting the graph before it differentiates. Compile refuses the graph where an op on
// the list cannot be cast (a product with a scalar result), naming it and the call that
// marks it by hand. The nodes downstream of a cast op are re-created: read values through
// Builder.Output, not through nodes the build function kept.
func WithAutocast(policy CastPolicy) BuildOption { return func(c *buildConfig) { c.cast = policy } }

// Autocast rewrites the inputs of a lower-precision op of module path under the graph's
// autocast policy; without a policy it returns them unchanged. nil inputs (an absent bias)
// stay nil. Layers and user ops on the lower-precision list call it before the op and
// AutocastOutput after it. An op so marked (its output given to AutocastOutput, directly or
// through reshapes and transposes, or each of its inputs returned by Autocast) is left as
// it is by Compile's autocast of gorgonia's ops, whether or not the policy is on for path.
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
