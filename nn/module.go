// Package nn builds models as named parameters and buffers that live outside gorgonia's
// graph, plus functions that build a graph from them (docs/DESIGN.md §2).
//
// A Module declares its parameters and buffers into a Scope (with torchvision's dotted names)
// and builds its forward computation with a Builder. NewModel allocates every parameter in
// two flat float32 buffers (values and gradients). Compile builds the model into a graph once
// and returns a Program that is run once per step: inputs are copied in, gradients are
// accumulated into the flat gradient buffer (as PyTorch accumulates into .grad), and the
// optimizer updates the flat value buffer in place, which every graph built from the model
// sees at its next run. One model can be compiled into many programs: a training and an
// evaluation program, DataParallel replicas, a program per process for DDP.
package nn

import (
	"fmt"
	"math/rand"
	"strings"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Module is a layer or a block of layers.
type Module interface {
	// Declare registers the module's parameters, buffers and children in s.
	Declare(s *Scope) error
	// Forward builds the module's computation on x into b's graph and returns its output.
	Forward(b *Builder, x *G.Node) (*G.Node, error)
}

// Scope collects the parameters and buffers that modules declare, under a dotted prefix.
type Scope struct {
	prefix string
	reg    *registry
}

type registry struct {
	params  []*Param
	buffers []*Buffer
}

// Path is the scope's dotted name without the trailing dot ("layer1.0"); empty at the root.
func (s *Scope) Path() string { return strings.TrimSuffix(s.prefix, ".") }

// Name returns the full dotted name of a member called name in this scope.
func (s *Scope) Name(name string) string { return s.prefix + name }

// Param declares a learnable float32 parameter.
func (s *Scope) Param(name string, shape []int, init Initializer) *Param {
	p := &Param{Name: s.prefix + name, Shape: append([]int(nil), shape...), Init: init}
	s.reg.params = append(s.reg.params, p)
	return p
}

// Buffer declares a float32 buffer (for example BatchNorm's running_mean).
func (s *Scope) Buffer(name string, shape []int, init Initializer) *Buffer {
	b := &Buffer{Name: s.prefix + name, Shape: append([]int(nil), shape...), Init: init}
	s.reg.buffers = append(s.reg.buffers, b)
	return b
}

// Int64Buffer declares an int64 buffer (for example BatchNorm's num_batches_tracked, shape []).
func (s *Scope) Int64Buffer(name string, shape []int) *Buffer {
	n, _ := numel(shape)
	b := &Buffer{Name: s.prefix + name, Shape: append([]int(nil), shape...), Int64: make([]int64, n)}
	s.reg.buffers = append(s.reg.buffers, b)
	return b
}

// Child declares module m under the name name ("layer1", "0", "conv1").
func (s *Scope) Child(name string, m Module) error {
	if m == nil {
		return fmt.Errorf("nn: %s: nil module", s.prefix+name)
	}
	sub := &Scope{prefix: s.prefix + name + ".", reg: s.reg}
	if err := m.Declare(sub); err != nil {
		return err
	}
	return nil
}

// Model is a module tree with its parameters and buffers allocated.
type Model struct {
	// Root is the top module; its Forward is the model's forward.
	Root Module
	// Params owns the parameters (flat buffers) and buffers.
	Params *ParamSet
	// RNG drives Dropout and DropPath; its state belongs in checkpoints.
	RNG *ops.RNG
}

type modelConfig struct {
	seed  int64
	alloc GradAllocator
}

// GradAllocator returns n zeroed float32s for a model's flat gradient buffer.
type GradAllocator func(n int) ([]float32, error)

// WithGradAllocator makes NewModel take the flat gradient buffer (ParamSet.Grad) from alloc
// instead of the Go heap. ddp.SharedGradients uses it to place the gradients in memory the
// other ranks of the host map, so that all-reduces read and write them in place.
func WithGradAllocator(alloc GradAllocator) ModelOption {
	return func(c *modelConfig) { c.alloc = alloc }
}

// ModelOption configures NewModel.
type ModelOption func(*modelConfig)

// WithSeed seeds parameter initialisation and the model's dropout RNG (default 0).
func WithSeed(seed int64) ModelOption { return func(c *modelConfig) { c.seed = seed } }

// allocGrad moves ps's gradients into the buffer of the configured allocator, if any.
func (c *modelConfig) allocGrad(ps *ParamSet) error {
	if c.alloc == nil {
		return nil
	}
	buf, err := c.alloc(len(ps.Grad))
	if err != nil {
		return fmt.Errorf("nn: allocating the gradient buffer (%d float32): %w", len(ps.Grad), err)
	}
	if len(buf) != len(ps.Grad) {
		return fmt.Errorf("nn: the gradient allocator returned %d float32, want %d", len(buf), len(ps.Grad))
	}
	ps.useGrad(buf)
	return nil
}

// NewModel declares root's parameters and buffers and allocates them, initialised from the seed.
func NewModel(root Module, opts ...ModelOption) (*Model, error) {
	cfg := modelConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	reg := &registry{}
	if err := root.Declare(&Scope{reg: reg}); err != nil {
		return nil, err
	}
	ps, err := NewParamSet(rand.New(rand.NewSource(cfg.seed)), reg.params, reg.buffers)
	if err != nil {
		return nil, err
	}
	if err := cfg.allocGrad(ps); err != nil {
		return nil, err
	}
	return &Model{Root: root, Params: ps, RNG: ops.NewRNG(uint64(cfg.seed))}, nil
}
