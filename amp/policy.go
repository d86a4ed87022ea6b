package amp

import (
	"fmt"
	"strings"
	"sync"

	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
)

// Policy is an autocast policy: an nn.CastPolicy that rounds the inputs and the output of
// every lower-precision op (convolution, linear, batched matmul) to its format, in the
// modules where it is on. Build a model under it with nn.Compile(..., nn.WithAutocast(p)).
// A Policy may be shared by several graphs built one after another.
type Policy struct {
	format Format
	except []string
	only   []string

	mu      sync.Mutex
	rounded map[*G.Node]*G.Node // input node -> its rounded node (rounded nodes map to themselves)
}

// PolicyOption configures Autocast.
type PolicyOption func(*Policy)

// Except turns autocast off in the modules under each of the dotted prefixes ("head",
// "layer4.1"): a prefix matches the module itself and its descendants, by whole name
// components ("head" matches "head" and "head.fc", not "header"). PyTorch's equivalent is a
// nested torch.autocast(enabled=False) region around those modules.
func Except(prefixes ...string) PolicyOption {
	return func(p *Policy) { p.except = append(p.except, prefixes...) }
}

// Only turns autocast on in the modules under the given prefixes and off elsewhere. Except
// still applies inside them.
func Only(prefixes ...string) PolicyOption {
	return func(p *Policy) { p.only = append(p.only, prefixes...) }
}

// Autocast returns a policy that computes lower-precision ops in format f (BF16 is PyTorch's
// CPU default, FP16 its CUDA default).
func Autocast(f Format, opts ...PolicyOption) *Policy {
	p := &Policy{format: f, rounded: map[*G.Node]*G.Node{}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Format is the policy's 16-bit format.
func (p *Policy) Format() Format { return p.format }

// Enabled reports whether autocast is on for the module at the dotted path.
func (p *Policy) Enabled(path string) bool {
	if len(p.only) > 0 && !matchAny(p.only, path) {
		return false
	}
	return !matchAny(p.except, path)
}

// CastInput implements nn.CastPolicy: n rounded to the policy's format where the policy is
// on for path. A node is rounded once per graph, however many ops read it (PyTorch caches
// the casts of weights the same way), and the output of a lower-precision op is not rounded
// again when the next one reads it.
func (p *Policy) CastInput(_ *nn.Builder, path string, n *G.Node) (*G.Node, error) {
	return p.cast(path, n)
}

// CastOutput implements nn.CastPolicy: the op's output rounded to the policy's format, as a
// 16-bit op returns a 16-bit tensor.
func (p *Policy) CastOutput(_ *nn.Builder, path string, n *G.Node) (*G.Node, error) {
	return p.cast(path, n)
}

func (p *Policy) cast(path string, n *G.Node) (*G.Node, error) {
	if n == nil || !p.Enabled(path) {
		return n, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.rounded[n]; ok {
		return r, nil
	}
	r, err := Round(n, p.format)
	if err != nil {
		return nil, fmt.Errorf("amp: autocast %s: %w", path, err)
	}
	p.rounded[n], p.rounded[r] = r, r
	return r, nil
}

// matchAny reports whether path is one of prefixes or lies under one of them.
func matchAny(prefixes []string, path string) bool {
	for _, pre := range prefixes {
		if pre == "" || path == pre || strings.HasPrefix(path, pre+".") {
			return true
		}
	}
	return false
}
