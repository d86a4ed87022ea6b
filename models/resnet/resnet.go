// Package resnet is torchvision's ResNet (v1.5: Bottleneck strides on its 3x3 convolution)
// built on package nn, with torchvision 0.14.1's parameter names, shapes and initialisation,
// so that torchvision state dicts load unchanged (see package models for .npz import/export).
package resnet

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// BlockKind selects the residual block.
type BlockKind int

const (
	// Basic is torchvision's BasicBlock: two 3x3 convolutions, expansion 1.
	Basic BlockKind = iota
	// Bottleneck is torchvision's Bottleneck (v1.5): 1x1, 3x3 (strided), 1x1, expansion 4.
	Bottleneck
)

func (k BlockKind) expansion() int {
	if k == Bottleneck {
		return 4
	}
	return 1
}

// Config describes a ResNet. The zero values of the optional fields mean torchvision's
// defaults, so Config{Block: Basic, Layers: [4]int{2, 2, 2, 2}} is resnet18.
type Config struct {
	// Block is the residual block of every stage.
	Block BlockKind
	// Layers is the number of blocks of each of the four stages.
	Layers [4]int
	// Widths are the stages' planes (default 64, 128, 256, 512); the output of stage i has
	// Widths[i]*expansion channels. Reduced widths are for tests; torchvision fixes them.
	Widths [4]int
	// StemWidth is the output channel count of conv1 (default 64).
	StemWidth int
	// NumClasses is the size of the fc head (default 1000).
	NumClasses int
	// ZeroInitResidual starts the last BatchNorm of each block at weight zero.
	ZeroInitResidual bool
	// Groups and WidthPerGroup are torchvision's groups and width_per_group (default 1, 64),
	// for ResNeXt-style Bottlenecks.
	Groups, WidthPerGroup int
}

// Archs lists the architectures Arch knows, in order of depth.
var Archs = []string{"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}

// Arch returns the configuration of torchvision's named architecture ("resnet50") with
// numClasses outputs (0 means 1000).
func Arch(name string, numClasses int) (Config, error) {
	c := Config{NumClasses: numClasses}
	switch name {
	case "resnet18":
		c.Block, c.Layers = Basic, [4]int{2, 2, 2, 2}
	case "resnet34":
		c.Block, c.Layers = Basic, [4]int{3, 4, 6, 3}
	case "resnet50":
		c.Block, c.Layers = Bottleneck, [4]int{3, 4, 6, 3}
	case "resnet101":
		c.Block, c.Layers = Bottleneck, [4]int{3, 4, 23, 3}
	case "resnet152":
		c.Block, c.Layers = Bottleneck, [4]int{3, 8, 36, 3}
	default:
		return Config{}, fmt.Errorf("resnet: unknown architecture %q (want one of %v)", name, Archs)
	}
	return c, nil
}

// ResNet18 returns torchvision's resnet18 with numClasses outputs (0 means 1000).
func ResNet18(numClasses int) (*ResNet, error) { return named("resnet18", numClasses) }

// ResNet34 returns torchvision's resnet34 with numClasses outputs (0 means 1000).
func ResNet34(numClasses int) (*ResNet, error) { return named("resnet34", numClasses) }

// ResNet50 returns torchvision's resnet50 with numClasses outputs (0 means 1000).
func ResNet50(numClasses int) (*ResNet, error) { return named("resnet50", numClasses) }

// ResNet101 returns torchvision's resnet101 with numClasses outputs (0 means 1000).
func ResNet101(numClasses int) (*ResNet, error) { return named("resnet101", numClasses) }

// ResNet152 returns torchvision's resnet152 with numClasses outputs (0 means 1000).
func ResNet152(numClasses int) (*ResNet, error) { return named("resnet152", numClasses) }

func named(arch string, numClasses int) (*ResNet, error) {
	c, err := Arch(arch, numClasses)
	if err != nil {
		return nil, err
	}
	return New(c)
}

// ResNet is the model: an nn.Module whose Forward maps images [N, 3, H, W] (NCHW, float32)
// to logits [N, NumClasses]. Build it into a model with nn.NewModel.
type ResNet struct {
	cfg     Config
	conv1   *nn.Conv2d
	bn1     *nn.BatchNorm2d
	maxpool *nn.MaxPool2d
	stages  [4]*nn.Sequential
	fc      *nn.Linear
}

// New builds the module tree of a ResNet described by c.
func New(c Config) (*ResNet, error) {
	if c.Widths == [4]int{} {
		c.Widths = [4]int{64, 128, 256, 512}
	}
	if c.StemWidth == 0 {
		c.StemWidth = 64
	}
	if c.NumClasses == 0 {
		c.NumClasses = 1000
	}
	if c.Groups == 0 {
		c.Groups = 1
	}
	if c.WidthPerGroup == 0 {
		c.WidthPerGroup = 64
	}
	if c.Block == Basic && (c.Groups != 1 || c.WidthPerGroup != 64) {
		return nil, fmt.Errorf("resnet: BasicBlock only supports groups=1 and width_per_group=64, got %d, %d", c.Groups, c.WidthPerGroup)
	}
	for i, n := range c.Layers {
		if n <= 0 || c.Widths[i] <= 0 {
			return nil, fmt.Errorf("resnet: stage %d needs positive blocks and width, got %d blocks of width %d", i+1, n, c.Widths[i])
		}
	}
	if c.StemWidth <= 0 || c.NumClasses < 0 {
		return nil, fmt.Errorf("resnet: invalid stem width %d or class count %d", c.StemWidth, c.NumClasses)
	}
	r := &ResNet{cfg: c}
	r.conv1 = conv(3, c.StemWidth, 7, 2, 3, 1)
	r.bn1 = &nn.BatchNorm2d{C: c.StemWidth}
	r.maxpool = &nn.MaxPool2d{Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}
	in := c.StemWidth
	for s := range 4 {
		stride := 2
		if s == 0 {
			stride = 1
		}
		seq := &nn.Sequential{}
		for range c.Layers[s] {
			blk := newBlock(c, in, c.Widths[s], stride)
			seq.Layers = append(seq.Layers, blk)
			in = c.Widths[s] * c.Block.expansion()
			stride = 1
		}
		r.stages[s] = seq
	}
	r.fc = &nn.Linear{In: in, Out: c.NumClasses}
	return r, nil
}

// Config returns the configuration with defaults filled in.
func (r *ResNet) Config() Config { return r.cfg }

// Declare implements nn.Module with torchvision's names: conv1, bn1, layer1..layer4, fc.
func (r *ResNet) Declare(s *nn.Scope) error {
	for _, c := range []struct {
		name string
		m    nn.Module
	}{{"conv1", r.conv1}, {"bn1", r.bn1}, {"relu", &nn.ReLU{}}, {"maxpool", r.maxpool},
		{"layer1", r.stages[0]}, {"layer2", r.stages[1]}, {"layer3", r.stages[2]}, {"layer4", r.stages[3]},
		{"fc", r.fc}} {
		if err := s.Child(c.name, c.m); err != nil {
			return err
		}
	}
	return nil
}

// Forward implements nn.Module: images [N, 3, H, W] to logits [N, NumClasses]. Inputs with
// the wrong rank or channel count, or too small for the network (an empty feature map, or in
// train mode a BatchNorm with one value per channel, as PyTorch refuses), are errors naming
// the layer and the shapes.
func (r *ResNet) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	if err := checkInput(x, r.cfg, b.Training()); err != nil {
		return nil, err
	}
	var err error
	if x, err = r.conv1.Forward(b, x); err != nil {
		return nil, err
	}
	if x, err = bnReLU(b, r.bn1, x); err != nil {
		return nil, fmt.Errorf("bn1+relu: %w", err)
	}
	if x, err = r.maxpool.Forward(b, x); err != nil {
		return nil, err
	}
	for _, st := range r.stages {
		if x, err = st.Forward(b, x); err != nil {
			return nil, err
		}
	}
	if x, err = ops.AdaptiveAvgPool2d1(x); err != nil {
		return nil, fmt.Errorf("avgpool: %w", err)
	}
	if x, err = ops.Flatten(x); err != nil {
		return nil, fmt.Errorf("flatten: %w", err)
	}
	return r.fc.Forward(b, x)
}

// conv is a bias-free convolution with torchvision ResNet's kaiming_normal_(fan_out) init.
func conv(in, out, k, stride, pad, groups int) *nn.Conv2d {
	return &nn.Conv2d{
		In: in, Out: out, Groups: groups,
		Kernel: [2]int{k, k}, Stride: [2]int{stride, stride}, Padding: [2]int{pad, pad},
		WeightInit: nn.KaimingNormalFanOut(out * k * k),
	}
}
