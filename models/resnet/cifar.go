package resnet

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Note [CIFAR ResNets]
//
// torchvision's ResNets are built for 224x224 ImageNet crops: a 7x7 stride-2 stem and a
// stride-2 max-pool shrink a 32x32 or 28x28 image to 8x8 or 7x7 before the first block, and
// the last stage sees 1x1. He et al. 2016 (§4.2) train CIFAR-10 with a different family:
// a 3x3 stride-1 stem, no max-pool, three stages of n BasicBlocks each at 16, 32 and 64
// channels (strides 1, 2, 2), global average pooling and the classifier: 6n+2 layers
// (resnet20 is n=3, resnet56 n=9). Small grey or colour images (CIFAR, Fashion-MNIST) train
// to better accuracy per FLOP with these. The blocks here are this package's BasicBlocks,
// so a stage's first block downsamples with a 1x1 convolution and BatchNorm (the paper's
// option B) rather than option A's zero-padded identity; the names follow torchvision's
// (conv1, bn1, layer1.0.conv1, ..., layer2.0.downsample.0, fc).

// CIFARArchs lists CIFAR ResNets by name, among all that CIFARArch parses: the paper's five
// depths at widths 16, 32, 64, the 8- and 14-layer nets, a wider 8-layer net, and the
// Fashion-MNIST demo's resnet8_s2.
var CIFARArchs = []string{"resnet8", "resnet14", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet8_w32", "resnet8_s2"}

// CIFARConfig describes a CIFAR-style ResNet (see Note [CIFAR ResNets]).
type CIFARConfig struct {
	// Blocks is the number of BasicBlocks in each of the three stages (n; 6n+2 layers).
	Blocks int
	// Widths are the stages' channels (default 16, 32, 64); the stem has Widths[0].
	Widths [3]int
	// StemStride is the stride of the 3x3 stem (default 1, the paper's). 2 runs the stages
	// at half the resolution, a quarter of the cost: for 28x28 images the stages see 14x14,
	// 7x7 and 4x4 (resnet8_s2, the Fashion-MNIST demo's model).
	StemStride int
	// NumClasses is the size of the fc head (default 10).
	NumClasses int
}

// Name is the architecture's name: resnet<6n+2>, then _w<W> when the widths are W, 2W, 4W
// other than 16, 32, 64, then _s2 when the stem has stride 2. It is "" for widths of
// another shape, which have no name.
func (c CIFARConfig) Name() string {
	w := c.Widths
	if w == [3]int{} {
		w = [3]int{16, 32, 64}
	}
	if w[1] != 2*w[0] || w[2] != 4*w[0] {
		return ""
	}
	name := fmt.Sprintf("resnet%d", 6*c.Blocks+2)
	if w[0] != 16 {
		name += fmt.Sprintf("_w%d", w[0])
	}
	if c.StemStride == 2 {
		name += "_s2"
	}
	return name
}

// CIFARArch parses the name of a CIFAR ResNet (see CIFARConfig.Name: "resnet20",
// "resnet8_w24_s2") and returns its configuration with numClasses outputs (0 means 10).
// torchvision's names (resnet50 is also 6n+2) are not CIFAR ResNets.
func CIFARArch(name string, numClasses int) (CIFARConfig, error) {
	bad := func(why string) (CIFARConfig, error) {
		return CIFARConfig{}, fmt.Errorf("resnet: %q is no CIFAR ResNet: %s (want resnet<6n+2>[_w<width>][_s2], like %v)", name, why, CIFARArchs)
	}
	for _, a := range Archs {
		if a == name {
			return bad("it is torchvision's ImageNet ResNet")
		}
	}
	rest, ok := strings.CutPrefix(name, "resnet")
	if !ok {
		return bad("no resnet prefix")
	}
	parts := strings.Split(rest, "_")
	depth, err := strconv.Atoi(parts[0])
	if err != nil || depth < 8 || (depth-2)%6 != 0 {
		return bad("the depth is not 6n+2 with n >= 1")
	}
	c := CIFARConfig{Blocks: (depth - 2) / 6, Widths: [3]int{16, 32, 64}, StemStride: 1, NumClasses: numClasses}
	for _, p := range parts[1:] {
		if w, ok := strings.CutPrefix(p, "w"); ok {
			n, err := strconv.Atoi(w)
			if err != nil || n <= 0 {
				return bad("width " + w)
			}
			c.Widths = [3]int{n, 2 * n, 4 * n}
		} else if p == "s2" {
			c.StemStride = 2
		} else {
			return bad("unknown part " + p)
		}
	}
	if c.Name() != name {
		return bad("write it " + c.Name())
	}
	return c, nil
}

// IsCIFAR reports whether CIFARArch parses name.
func IsCIFAR(name string) bool {
	_, err := CIFARArch(name, 0)
	return err == nil
}

// CIFARResNet is the model: an nn.Module whose Forward maps images [N, 3, H, W] (NCHW,
// float32) to logits [N, NumClasses]. Build it into a model with nn.NewModel.
type CIFARResNet struct {
	cfg    CIFARConfig
	conv1  *nn.Conv2d
	bn1    *nn.BatchNorm2d
	stages [3]*nn.Sequential
	fc     *nn.Linear
}

// NewCIFAR builds the module tree of the CIFAR ResNet c describes.
func NewCIFAR(c CIFARConfig) (*CIFARResNet, error) {
	if c.Widths == [3]int{} {
		c.Widths = [3]int{16, 32, 64}
	}
	if c.NumClasses == 0 {
		c.NumClasses = 10
	}
	if c.StemStride == 0 {
		c.StemStride = 1
	}
	if c.Blocks <= 0 || c.NumClasses < 0 || c.StemStride < 1 || c.StemStride > 2 {
		return nil, fmt.Errorf("resnet: CIFAR ResNet needs positive blocks per stage and classes and a stem stride of 1 or 2, got %d, %d and %d",
			c.Blocks, c.NumClasses, c.StemStride)
	}
	for i, w := range c.Widths {
		if w <= 0 {
			return nil, fmt.Errorf("resnet: CIFAR ResNet stage %d width %d, want > 0", i+1, w)
		}
	}
	r := &CIFARResNet{cfg: c}
	r.conv1 = conv(3, c.Widths[0], 3, c.StemStride, 1, 1)
	r.bn1 = &nn.BatchNorm2d{C: c.Widths[0]}
	in := c.Widths[0]
	bc := Config{Block: Basic, Groups: 1, WidthPerGroup: 64}
	for s := range 3 {
		stride := 2
		if s == 0 {
			stride = 1
		}
		seq := &nn.Sequential{}
		for range c.Blocks {
			seq.Layers = append(seq.Layers, newBlock(bc, in, c.Widths[s], stride))
			in, stride = c.Widths[s], 1
		}
		r.stages[s] = seq
	}
	r.fc = &nn.Linear{In: in, Out: c.NumClasses}
	return r, nil
}

// Config returns the configuration with defaults filled in.
func (r *CIFARResNet) Config() CIFARConfig { return r.cfg }

// Declare implements nn.Module: conv1, bn1, layer1..layer3, fc.
func (r *CIFARResNet) Declare(s *nn.Scope) error {
	for _, c := range []struct {
		name string
		m    nn.Module
	}{{"conv1", r.conv1}, {"bn1", r.bn1}, {"relu", &nn.ReLU{}},
		{"layer1", r.stages[0]}, {"layer2", r.stages[1]}, {"layer3", r.stages[2]}, {"fc", r.fc}} {
		if err := s.Child(c.name, c.m); err != nil {
			return err
		}
	}
	return nil
}

// Forward implements nn.Module: images [N, 3, H, W] to logits [N, NumClasses]. Inputs with
// the wrong rank or channel count, or too small for the two stride-2 stages, are errors
// naming the layer and the shapes.
func (r *CIFARResNet) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	if err := r.checkInput(x, b.Training()); err != nil {
		return nil, err
	}
	var err error
	if x, err = r.conv1.Forward(b, x); err != nil {
		return nil, err
	}
	if x, err = bnReLU(b, r.bn1, x); err != nil {
		return nil, fmt.Errorf("bn1+relu: %w", err)
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

func (r *CIFARResNet) checkInput(x *G.Node, training bool) error {
	s := []int(x.Shape())
	if len(s) != 4 {
		return fmt.Errorf("resnet: conv1: input shape %v, want [N, 3, H, W]", s)
	}
	if s[1] != 3 {
		return fmt.Errorf("resnet: conv1: input %v has %d channels, conv1.weight [%d, 3, 3, 3] wants 3", s, s[1], r.cfg.Widths[0])
	}
	n, h, w := s[0], s[2], s[3]
	if n < 1 || h < 1 || w < 1 {
		return fmt.Errorf("resnet: conv1: input %v is empty", s)
	}
	// layer3's first block sees the image downsampled by each stride-2 convolution before
	// it: layer2's, layer3's and the stem's when it has stride 2.
	for _, stride := range []int{r.cfg.StemStride, 2, 2} {
		h, w = (h-1)/stride+1, (w-1)/stride+1
	}
	if training && n*h*w < 2 {
		return fmt.Errorf("resnet: layer3.0.bn1: input %v is too small for train mode: BatchNorm would see one value per channel (feature map %dx%d, batch %d)", s, h, w, n)
	}
	return nil
}
