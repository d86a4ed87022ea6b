// Package swin is torchvision's Swin Transformer v1 (swin_t, swin_s, swin_b, and swin_l from
// the paper with the same naming) built on package nn, with torchvision 0.14.1's parameter
// names, shapes, initialisation and numerics, including window padding and shifted windows.
package swin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Config describes a Swin Transformer as torchvision's SwinTransformer arguments.
type Config struct {
	// PatchSize is the patch embedding's kernel and stride (default 4).
	PatchSize int
	// EmbedDim is C, the channel count of the first stage; stage i has C·2^i.
	EmbedDim int
	// Depths and Heads give each stage's block count and attention heads.
	Depths, Heads []int
	// Window is the attention window side (default 7); odd blocks shift by Window/2.
	Window int
	// MLPRatio is the MLP's hidden width over the channel count (default 4).
	MLPRatio float64
	// StochasticDepth is the drop-path probability of the last block; block k of K has
	// StochasticDepth·k/(K-1), rising linearly from 0 as in torchvision.
	StochasticDepth float64
	// NumClasses is the size of the head (default 1000).
	NumClasses int
}

// Archs lists torchvision's architectures Arch knows.
var Archs = []string{"swin_t", "swin_s", "swin_b", "swin_l"}

// TestArchs lists the architectures Arch knows for tests only, as timm's test_* models: the
// same code paths at a size the CPU emulator of cuda/tape trains in seconds.
var TestArchs = []string{"swin_test"}

// Arch returns the configuration of the named architecture with numClasses outputs (0
// means 1000): torchvision's swin_t, swin_s, swin_b (stochastic depth 0.2, 0.3, 0.5), and
// swin_l from the paper (C=192, depths 2,2,18,2, heads 6,12,24,48; stochastic depth 0.5).
func Arch(name string, numClasses int) (Config, error) {
	c := Config{NumClasses: numClasses, Depths: []int{2, 2, 6, 2}}
	switch name {
	case "swin_t":
		c.EmbedDim, c.Heads, c.StochasticDepth = 96, []int{3, 6, 12, 24}, 0.2
	case "swin_s":
		c.EmbedDim, c.Depths, c.Heads, c.StochasticDepth = 96, []int{2, 2, 18, 2}, []int{3, 6, 12, 24}, 0.3
	case "swin_b":
		c.EmbedDim, c.Depths, c.Heads, c.StochasticDepth = 128, []int{2, 2, 18, 2}, []int{4, 8, 16, 32}, 0.5
	case "swin_l":
		c.EmbedDim, c.Depths, c.Heads, c.StochasticDepth = 192, []int{2, 2, 18, 2}, []int{6, 12, 24, 48}, 0.5
	case "swin_test":
		// Two stages of a shifted and an unshifted block with window 2: window padding,
		// the shift mask, PatchMerging and stochastic depth at 16×16 inputs, 35k parameters
		// (with 10 classes).
		c.EmbedDim, c.Depths, c.Heads, c.Window, c.StochasticDepth = 16, []int{2, 2}, []int{1, 2}, 2, 0.1
	default:
		return Config{}, fmt.Errorf("swin: unknown architecture %q (want one of %v or %v)", name, Archs, TestArchs)
	}
	return c, nil
}

// SwinT returns torchvision's swin_t with numClasses outputs (0 means 1000).
func SwinT(numClasses int) (*Swin, error) { return named("swin_t", numClasses) }

// SwinS returns torchvision's swin_s with numClasses outputs (0 means 1000).
func SwinS(numClasses int) (*Swin, error) { return named("swin_s", numClasses) }

// SwinB returns torchvision's swin_b with numClasses outputs (0 means 1000).
func SwinB(numClasses int) (*Swin, error) { return named("swin_b", numClasses) }

// SwinL returns the paper's Swin-L with torchvision's naming and numClasses outputs.
func SwinL(numClasses int) (*Swin, error) { return named("swin_l", numClasses) }

func named(arch string, numClasses int) (*Swin, error) {
	c, err := Arch(arch, numClasses)
	if err != nil {
		return nil, err
	}
	return New(c)
}

// Swin is the model: an nn.Module whose Forward maps images [N, 3, H, W] (NCHW, float32,
// H and W at least PatchSize) to logits [N, NumClasses].
type Swin struct {
	cfg      Config
	features *nn.Sequential
	embed    *nn.Conv2d
	norm     *nn.LayerNorm
	head     *nn.Linear
}

// New builds the module tree of the Swin Transformer described by c.
func New(c Config) (*Swin, error) {
	if c.PatchSize == 0 {
		c.PatchSize = 4
	}
	if c.Window == 0 {
		c.Window = 7
	}
	if c.MLPRatio == 0 {
		c.MLPRatio = 4
	}
	if c.NumClasses == 0 {
		c.NumClasses = 1000
	}
	if c.EmbedDim <= 0 || len(c.Depths) == 0 || len(c.Depths) != len(c.Heads) || c.PatchSize < 1 || c.Window < 1 {
		return nil, fmt.Errorf("swin: invalid config: embed dim %d, depths %v, heads %v, patch %d, window %d", c.EmbedDim, c.Depths, c.Heads, c.PatchSize, c.Window)
	}
	total := 0
	for i, d := range c.Depths {
		dim := c.EmbedDim << i
		if d <= 0 || c.Heads[i] <= 0 || dim%c.Heads[i] != 0 {
			return nil, fmt.Errorf("swin: stage %d: %d blocks, %d heads for %d channels", i+1, d, c.Heads[i], dim)
		}
		total += d
	}
	s := &Swin{cfg: c}
	s.embed = &nn.Conv2d{In: 3, Out: c.EmbedDim, Kernel: [2]int{c.PatchSize, c.PatchSize}, Stride: [2]int{c.PatchSize, c.PatchSize}, Bias: true}
	s.features = nn.Seq(&patchEmbed{conv: s.embed, norm: &nn.LayerNorm{Shape: []int{c.EmbedDim}}})
	k := 0
	for i, d := range c.Depths {
		dim := c.EmbedDim << i
		stage := &nn.Sequential{}
		for j := range d {
			p := 0.0
			if total > 1 {
				p = c.StochasticDepth * float64(k) / float64(total-1)
			}
			stage.Layers = append(stage.Layers, newBlock(dim, c.Heads[i], c.Window, (j%2)*(c.Window/2), c.MLPRatio, p))
			k++
		}
		s.features.Layers = append(s.features.Layers, stage)
		if i < len(c.Depths)-1 {
			s.features.Layers = append(s.features.Layers, &patchMerging{dim: dim})
		}
	}
	last := c.EmbedDim << (len(c.Depths) - 1)
	s.norm = &nn.LayerNorm{Shape: []int{last}}
	s.head = linear(last, c.NumClasses, true)
	return s, nil
}

// Config returns the configuration with defaults filled in.
func (s *Swin) Config() Config { return s.cfg }

// DropPathProbs lists each block's stochastic-depth probability in order.
func (s *Swin) DropPathProbs() []float64 {
	var out []float64
	for _, l := range s.features.Layers {
		if st, ok := l.(*nn.Sequential); ok {
			for _, b := range st.Layers {
				out = append(out, b.(*block).drop1.P)
			}
		}
	}
	return out
}

// Declare implements nn.Module with torchvision's names: features.*, norm, head.
func (s *Swin) Declare(sc *nn.Scope) error {
	if err := sc.Child("features", s.features); err != nil {
		return err
	}
	if err := sc.Child("norm", s.norm); err != nil {
		return err
	}
	return sc.Child("head", s.head)
}

// Forward implements nn.Module: images [N, 3, H, W] to logits [N, NumClasses]. Wrong ranks,
// channel counts and inputs smaller than a patch are errors naming the layer and shapes.
func (s *Swin) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	sh := []int(x.Shape())
	if len(sh) != 4 || sh[1] != 3 {
		return nil, fmt.Errorf("swin: features.0.0 (patch embedding, weight %v): input %v, want [N, 3, H, W]", s.embed.W.Shape, sh)
	}
	if sh[2] < s.cfg.PatchSize || sh[3] < s.cfg.PatchSize {
		return nil, fmt.Errorf("swin: features.0.0 (patch embedding, %dx%d stride %d): input %v is smaller than one patch", s.cfg.PatchSize, s.cfg.PatchSize, s.cfg.PatchSize, sh)
	}
	y, err := s.features.Forward(b, x)
	if err != nil {
		return nil, err
	}
	if y, err = s.norm.Forward(b, y); err != nil {
		return nil, err
	}
	pooled, err := ops.Mean(y, 1, 2)
	if err != nil {
		return nil, fmt.Errorf("swin: avgpool %v: %w", y.Shape(), err)
	}
	return s.head.Forward(b, pooled)
}

// linear is a Linear with Swin's initialisation: trunc_normal(std=0.02) weights, zero bias.
func linear(in, out int, bias bool) *nn.Linear {
	return &nn.Linear{In: in, Out: out, NoBias: !bias, WeightInit: nn.TruncNormal(0.02), BiasInit: nn.Constant(0)}
}
