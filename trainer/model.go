package trainer

import (
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// ForwardFunc is a plain gorgonia model: it builds the forward pass from images
// [n, c, h, w] to logits [n, classes] on b.Graph with gorgonia's operations (G.Conv2d,
// G.MaxPool2D, G.Mul, ...), creating each weight as a node without an op that holds its
// initial value (G.NewTensor(b.Graph, ..., G.WithInit(...))) and using, in its place, the
// node b.Learnable(w) returns. It is called once per compiled program (training,
// evaluation, each batch size) and must create the same weights in the same order each
// time; rank 0's initial values are broadcast to every rank.
type ForwardFunc func(b *nn.Builder, images *G.Node) (logits *G.Node, err error)

// Model is what a Trainer trains: an nn.Module, an architecture of the models package by
// name, or a plain gorgonia ForwardFunc. The zero Model is not usable.
type Model struct {
	name      string
	newModule func(classes int) (nn.Module, error)
	arch      string
	forward   ForwardFunc
	init      func(*nn.ParamSet) error
}

// Module trains m, an nn.Module that maps images [n, c, h, w] to logits [n, classes].
func Module(m nn.Module) Model {
	return Model{name: fmt.Sprintf("%T", m), newModule: func(int) (nn.Module, error) { return m, nil }}
}

// ModuleFor trains the module fn makes for the data's number of classes; fn is called
// once per Fit, on every rank.
func ModuleFor(fn func(classes int) (nn.Module, error)) Model {
	return Model{name: "module", newModule: fn}
}

// Arch trains the architecture models.New builds under name (models.Archs lists them, and
// any CIFAR ResNet resnet<6n+2>), with as many classes as the data has.
func Arch(name string) Model {
	return Model{name: name, arch: name, newModule: func(classes int) (nn.Module, error) { return models.New(name, classes) }}
}

// Graph trains a plain gorgonia model (ForwardFunc).
func Graph(fn ForwardFunc) Model { return Model{name: "graph", forward: fn} }

// Named returns m named name: the run directory's default (runs/NAME) and what the run's
// first line calls the model.
func (m Model) Named(name string) Model {
	m.name = name
	return m
}

// Init returns m with fn run on its parameters once they are allocated and initialised,
// before rank 0's are broadcast (to load pretrained weights, say); an error from fn ends
// the run before training.
func (m Model) Init(fn func(*nn.ParamSet) error) Model {
	m.init = fn
	return m
}

// Name is the model's name (see Named).
func (m Model) Name() string { return m.name }

// check refuses the zero Model and an unknown architecture.
func (m Model) check() error {
	switch {
	case m.newModule == nil && m.forward == nil:
		return fmt.Errorf("trainer: no model: use Module, ModuleFor, Arch or Graph")
	case m.arch != "" && !slices.Contains(models.Archs(), m.arch) && !resnet.IsCIFAR(m.arch):
		_, err := models.New(m.arch, 0)
		return fmt.Errorf("trainer: Arch(%q): %w", m.arch, err)
	}
	return nil
}

// build allocates the model for batches of images [n, shape...] and classes classes.
func (m Model) build(shape [3]int, classes int, opts ...nn.ModelOption) (*nn.Model, ForwardFunc, error) {
	var model *nn.Model
	var err error
	fwd := m.forward
	switch {
	case m.forward != nil:
		model, err = nn.NewGraphModel(classify(1, shape, 0, false, classes, m.forward), opts...)
	default:
		var mod nn.Module
		if mod, err = m.newModule(classes); err == nil {
			model, err = nn.NewModel(mod, opts...)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: model %s: %w", m.name, err)
	}
	if fwd == nil {
		fwd = (*nn.Builder).Forward
	}
	if m.init != nil {
		if err := m.init(model.Params); err != nil {
			return nil, nil, fmt.Errorf("trainer: model %s: initialising its parameters: %w", m.name, err)
		}
	}
	return model, fwd, nil
}

// classify is the classification graph of a forward for a batch of n images [n, shape...]:
// inputs "images" and "labels" [n] (class indices as floats), output "logits" [n,
// classes], and in train mode the mean cross-entropy with label smoothing (PyTorch's
// CrossEntropyLoss). With soft set (mixup, cutmix) the training graph takes "targets" [n,
// classes] instead of "labels" and the loss is the cross-entropy against them.
func classify(n int, shape [3]int, smoothing float64, soft bool, classes int, fwd ForwardFunc) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", n, shape[0], shape[1], shape[2])
		if err != nil {
			return nil, err
		}
		var y *G.Node
		if b.Training() || !soft {
			if soft {
				y, err = b.Input("targets", n, classes)
			} else {
				y, err = b.Input("labels", n)
			}
			if err != nil {
				return nil, err
			}
		}
		logits, err := fwd(b, x)
		if err != nil {
			return nil, err
		}
		if s := logits.Shape(); len(s) != 2 || s[0] != n || s[1] != classes {
			return nil, fmt.Errorf("trainer: the model's logits are %v for images %v; want (%d, %d) (%d classes in the data)",
				s, x.Shape(), n, classes, classes)
		}
		b.Output("logits", logits)
		switch {
		case !b.Training():
			return nil, nil
		case soft:
			return ops.SoftCrossEntropy(logits, y)
		default:
			return ops.CrossEntropy(logits, y, smoothing)
		}
	}
}
