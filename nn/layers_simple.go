package nn

import (
	"fmt"
	"strconv"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// stateless is embedded by modules without parameters.
type stateless struct{ path string }

func (s *stateless) Declare(sc *Scope) error { s.path = sc.Path(); return nil }

// ReLU is torch.nn.ReLU.
type ReLU struct{ stateless }

// Forward implements Module.
func (r *ReLU) Forward(_ *Builder, x *G.Node) (*G.Node, error) {
	y, err := ops.ReLU(x)
	return y, wrap(r.path, "ReLU", err)
}

// GELU is torch.nn.GELU with the exact erf form.
type GELU struct{ stateless }

// Forward implements Module.
func (r *GELU) Forward(_ *Builder, x *G.Node) (*G.Node, error) {
	y, err := ops.GELU(x)
	return y, wrap(r.path, "GELU", err)
}

// Identity returns its input.
type Identity struct{ stateless }

// Forward implements Module.
func (*Identity) Forward(_ *Builder, x *G.Node) (*G.Node, error) { return x, nil }

// Dropout is torch.nn.Dropout with probability P, seeded by the model's RNG.
type Dropout struct {
	stateless
	P float64
}

// Forward implements Module.
func (d *Dropout) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	if d.P == 0 || !b.Training() {
		return x, nil
	}
	y, err := ops.Dropout(x, d.P, b.RNG(), true)
	return y, wrap(d.path, "Dropout", err)
}

// DropPath is stochastic depth per sample (torchvision's StochasticDepth, mode "row").
type DropPath struct {
	stateless
	P float64
}

// Forward implements Module.
func (d *DropPath) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	if d.P == 0 || !b.Training() {
		return x, nil
	}
	y, err := ops.DropPath(x, d.P, b.RNG(), true)
	return y, wrap(d.path, "DropPath", err)
}

// MaxPool2d is torch.nn.MaxPool2d (ceil_mode=False, dilation 1). Stride zero means Kernel.
type MaxPool2d struct {
	stateless
	Kernel, Stride, Padding [2]int
}

// Forward implements Module.
func (m *MaxPool2d) Forward(_ *Builder, x *G.Node) (*G.Node, error) {
	s := m.Stride
	if s == [2]int{} {
		s = m.Kernel
	}
	y, err := ops.MaxPool2d(x, m.Kernel, s, m.Padding)
	return y, wrap(m.path, "MaxPool2d", err)
}

// AdaptiveAvgPool2d is torch.nn.AdaptiveAvgPool2d((1, 1)): the global average of each channel.
type AdaptiveAvgPool2d struct{ stateless }

// Forward implements Module.
func (m *AdaptiveAvgPool2d) Forward(_ *Builder, x *G.Node) (*G.Node, error) {
	y, err := ops.AdaptiveAvgPool2d1(x)
	return y, wrap(m.path, "AdaptiveAvgPool2d", err)
}

// Flatten is torch.nn.Flatten(1): [N, ...] to [N, prod(...)].
type Flatten struct{ stateless }

// Forward implements Module.
func (m *Flatten) Forward(_ *Builder, x *G.Node) (*G.Node, error) {
	y, err := ops.Flatten(x)
	return y, wrap(m.path, "Flatten", err)
}

// Sequential is torch.nn.Sequential: its children are named "0", "1", ... unless Names is set.
type Sequential struct {
	Layers []Module
	// Names, when set, names each child (torch's Sequential(OrderedDict(...))).
	Names []string
}

// Seq returns a Sequential of the given layers.
func Seq(layers ...Module) *Sequential { return &Sequential{Layers: layers} }

// Declare implements Module.
func (s *Sequential) Declare(sc *Scope) error {
	if s.Names != nil && len(s.Names) != len(s.Layers) {
		return fmt.Errorf("nn: %s: Sequential has %d layers and %d names", sc.Path(), len(s.Layers), len(s.Names))
	}
	for i, l := range s.Layers {
		name := strconv.Itoa(i)
		if s.Names != nil {
			name = s.Names[i]
		}
		if err := sc.Child(name, l); err != nil {
			return err
		}
	}
	return nil
}

// Forward implements Module.
func (s *Sequential) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	var err error
	for _, l := range s.Layers {
		if x, err = l.Forward(b, x); err != nil {
			return nil, err
		}
	}
	return x, nil
}
