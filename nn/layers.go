package nn

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Linear is torch.nn.Linear: y = x·Wᵀ + b over the last dimension of x. Parameters
// "weight" [Out, In] and "bias" [Out].
type Linear struct {
	In, Out int
	// NoBias drops the bias (torch's bias=False).
	NoBias bool
	// WeightInit and BiasInit override PyTorch's default initialisation.
	WeightInit, BiasInit Initializer

	W, B *Param
	path string
}

// Declare implements Module.
func (l *Linear) Declare(s *Scope) error {
	if l.In <= 0 || l.Out <= 0 {
		return fmt.Errorf("nn: %s: Linear needs positive In and Out, got %d, %d", s.Path(), l.In, l.Out)
	}
	l.path = s.Path()
	l.W = s.Param("weight", []int{l.Out, l.In}, orDefault(l.WeightInit, DefaultLinearInit(l.In)))
	if !l.NoBias {
		l.B = s.Param("bias", []int{l.Out}, orDefault(l.BiasInit, DefaultLinearInit(l.In)))
		l.B.NoWeightDecay = true
	}
	return nil
}

// Forward implements Module.
func (l *Linear) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	w, err := b.Param(l.W)
	if err != nil {
		return nil, err
	}
	var bias *G.Node
	if l.B != nil {
		if bias, err = b.Param(l.B); err != nil {
			return nil, err
		}
	}
	in, err := b.Autocast(l.path, x, w, bias)
	if err != nil {
		return nil, err
	}
	y, err := ops.Linear(in[0], in[1], in[2])
	if err != nil {
		return nil, wrap(l.path, "Linear", err)
	}
	return b.AutocastOutput(l.path, y)
}

// Conv2d is torch.nn.Conv2d on NCHW input. Parameters "weight" [Out, In/Groups, kh, kw] and
// "bias" [Out].
type Conv2d struct {
	In, Out                           int
	Kernel, Stride, Padding, Dilation [2]int
	Groups                            int
	// Bias adds a bias (torch's default is bias=True; torchvision's ResNet uses False).
	Bias bool
	// WeightInit overrides PyTorch's default initialisation.
	WeightInit Initializer

	W, B *Param
	path string
}

// Declare implements Module.
func (c *Conv2d) Declare(s *Scope) error {
	c.path = s.Path()
	g := max(c.Groups, 1)
	if c.In <= 0 || c.Out <= 0 || c.In%g != 0 || c.Out%g != 0 || c.Kernel[0] <= 0 || c.Kernel[1] <= 0 {
		return fmt.Errorf("nn: %s: invalid Conv2d in=%d out=%d kernel=%v groups=%d", c.path, c.In, c.Out, c.Kernel, g)
	}
	fanIn := c.In / g * c.Kernel[0] * c.Kernel[1]
	c.W = s.Param("weight", []int{c.Out, c.In / g, c.Kernel[0], c.Kernel[1]}, orDefault(c.WeightInit, DefaultLinearInit(fanIn)))
	if c.Bias {
		c.B = s.Param("bias", []int{c.Out}, DefaultLinearInit(fanIn))
		c.B.NoWeightDecay = true
	}
	return nil
}

// Forward implements Module.
func (c *Conv2d) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	w, err := b.Param(c.W)
	if err != nil {
		return nil, err
	}
	var bias *G.Node
	if c.B != nil {
		if bias, err = b.Param(c.B); err != nil {
			return nil, err
		}
	}
	in, err := b.Autocast(c.path, x, w, bias)
	if err != nil {
		return nil, err
	}
	y, err := ops.Conv2d(in[0], in[1], in[2], ops.ConvOpts{Stride: c.Stride, Padding: c.Padding, Dilation: c.Dilation, Groups: c.Groups})
	if err != nil {
		return nil, wrap(c.path, "Conv2d", err)
	}
	return b.AutocastOutput(c.path, y)
}

// BatchNorm2d is torch.nn.BatchNorm2d: parameters "weight" and "bias" [C], buffers
// "running_mean", "running_var" [C] and "num_batches_tracked" (int64, shape []). Building a
// program never resets the running statistics.
type BatchNorm2d struct {
	C int
	// Eps defaults to 1e-5 and Momentum to 0.1, as PyTorch.
	Eps, Momentum float64
	// ZeroInit starts the weight at zero (torchvision's zero_init_residual).
	ZeroInit bool

	W, B                  *Param
	Mean, Var, NumBatches *Buffer
	path                  string
}

// Declare implements Module.
func (n *BatchNorm2d) Declare(s *Scope) error {
	if n.C <= 0 {
		return fmt.Errorf("nn: %s: BatchNorm2d needs a positive channel count, got %d", s.Path(), n.C)
	}
	n.path = s.Path()
	w := float32(1)
	if n.ZeroInit {
		w = 0
	}
	n.W = s.Param("weight", []int{n.C}, Constant(w))
	n.B = s.Param("bias", []int{n.C}, Constant(0))
	n.W.NoWeightDecay, n.B.NoWeightDecay = true, true
	n.Mean = s.Buffer("running_mean", []int{n.C}, Constant(0))
	n.Var = s.Buffer("running_var", []int{n.C}, Constant(1))
	n.NumBatches = s.Int64Buffer("num_batches_tracked", []int{})
	return nil
}

// Forward implements Module.
func (n *BatchNorm2d) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	w, err := b.Param(n.W)
	if err != nil {
		return nil, err
	}
	bias, err := b.Param(n.B)
	if err != nil {
		return nil, err
	}
	eps, mom := n.Eps, n.Momentum
	if eps == 0 {
		eps = 1e-5
	}
	if mom == 0 {
		mom = 0.1
	}
	y, err := ops.BatchNorm2d(x, w, bias, b.BNState(n.Mean, n.Var, n.NumBatches, mom, eps))
	return y, wrap(n.path, "BatchNorm2d", err)
}

// LayerNorm is torch.nn.LayerNorm over the trailing dimensions Shape: parameters "weight"
// and "bias" shaped Shape.
type LayerNorm struct {
	Shape []int
	// Eps defaults to 1e-5, as PyTorch.
	Eps float64

	W, B *Param
	path string
}

// Declare implements Module.
func (n *LayerNorm) Declare(s *Scope) error {
	if len(n.Shape) == 0 {
		return fmt.Errorf("nn: %s: LayerNorm needs a normalized shape", s.Path())
	}
	n.path = s.Path()
	n.W = s.Param("weight", n.Shape, Constant(1))
	n.B = s.Param("bias", n.Shape, Constant(0))
	n.W.NoWeightDecay, n.B.NoWeightDecay = true, true
	return nil
}

// Forward implements Module.
func (n *LayerNorm) Forward(b *Builder, x *G.Node) (*G.Node, error) {
	w, err := b.Param(n.W)
	if err != nil {
		return nil, err
	}
	bias, err := b.Param(n.B)
	if err != nil {
		return nil, err
	}
	eps := n.Eps
	if eps == 0 {
		eps = 1e-5
	}
	y, err := ops.LayerNorm(x, w, bias, len(n.Shape), eps)
	return y, wrap(n.path, "LayerNorm", err)
}

func orDefault(i, def Initializer) Initializer {
	if i != nil {
		return i
	}
	return def
}

// wrap names the layer in an error from an op.
func wrap(path, kind string, err error) error {
	if err == nil {
		return nil
	}
	if path == "" {
		path = "(root)"
	}
	return fmt.Errorf("%s (%s): %w", path, kind, err)
}
