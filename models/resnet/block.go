package resnet

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// block is torchvision's BasicBlock or Bottleneck: the main path (conv, bn, relu pairs), an
// optional downsample (1x1 conv and bn) on the identity, and relu(main + identity).
type block struct {
	convs      []*nn.Conv2d
	bns        []*nn.BatchNorm2d
	downsample *nn.Sequential
	path       string
}

func newBlock(c Config, in, planes, stride int) *block {
	out := planes * c.Block.expansion()
	b := &block{}
	if c.Block == Basic {
		b.convs = []*nn.Conv2d{conv(in, planes, 3, stride, 1, 1), conv(planes, planes, 3, 1, 1, 1)}
	} else {
		width := planes * c.WidthPerGroup / 64 * c.Groups
		b.convs = []*nn.Conv2d{conv(in, width, 1, 1, 0, 1), conv(width, width, 3, stride, 1, c.Groups), conv(width, out, 1, 1, 0, 1)}
	}
	for i, cv := range b.convs {
		b.bns = append(b.bns, &nn.BatchNorm2d{C: cv.Out, ZeroInit: c.ZeroInitResidual && i == len(b.convs)-1})
	}
	if stride != 1 || in != out {
		b.downsample = nn.Seq(conv(in, out, 1, stride, 0, 1), &nn.BatchNorm2d{C: out})
	}
	return b
}

// Declare implements nn.Module: conv1, bn1, conv2, bn2[, conv3, bn3][, downsample.0/1].
func (b *block) Declare(s *nn.Scope) error {
	b.path = s.Path()
	for i := range b.convs {
		if err := s.Child(fmt.Sprintf("conv%d", i+1), b.convs[i]); err != nil {
			return err
		}
		if err := s.Child(fmt.Sprintf("bn%d", i+1), b.bns[i]); err != nil {
			return err
		}
	}
	if b.downsample != nil {
		return s.Child("downsample", b.downsample)
	}
	return nil
}

// Forward implements nn.Module.
func (b *block) Forward(bd *nn.Builder, x *G.Node) (*G.Node, error) {
	y := x
	var err error
	for i := range b.convs {
		if y, err = b.convs[i].Forward(bd, y); err != nil {
			return nil, err
		}
		if i == len(b.convs)-1 {
			if y, err = b.bns[i].Forward(bd, y); err != nil {
				return nil, err
			}
		} else if y, err = bnReLU(bd, b.bns[i], y); err != nil {
			return nil, fmt.Errorf("%s.bn%d+relu: %w", b.path, i+1, err)
		}
	}
	id := x
	if b.downsample != nil {
		if id, err = b.downsample.Forward(bd, x); err != nil {
			return nil, err
		}
	}
	if y, err = ops.AddReLU(y, id); err != nil {
		return nil, fmt.Errorf("%s: residual add and relu %v + %v: %w", b.path, y.Shape(), id.Shape(), err)
	}
	return y, nil
}

// bnReLU is relu(bn(x)) as the one op ops.BatchNormReLU, with the parameters and state
// nn.BatchNorm2d.Forward would use (the same defaults for Eps and Momentum).
func bnReLU(bd *nn.Builder, bn *nn.BatchNorm2d, x *G.Node) (*G.Node, error) {
	w, err := bd.Param(bn.W)
	if err != nil {
		return nil, err
	}
	bias, err := bd.Param(bn.B)
	if err != nil {
		return nil, err
	}
	eps, mom := bn.Eps, bn.Momentum
	if eps == 0 {
		eps = 1e-5
	}
	if mom == 0 {
		mom = 0.1
	}
	return ops.BatchNormReLU(x, w, bias, bd.BNState(bn.Mean, bn.Var, bn.NumBatches, mom, eps))
}

// checkInput validates images [N, 3, H, W] against the network before any op is built, so
// that the error names the first layer that cannot take the input.
func checkInput(x *G.Node, c Config, training bool) error {
	s := []int(x.Shape())
	if len(s) != 4 {
		return fmt.Errorf("resnet: conv1: input shape %v, want [N, 3, H, W]", s)
	}
	if s[1] != 3 {
		return fmt.Errorf("resnet: conv1: input %v has %d channels, conv1.weight [%d, 3, 7, 7] wants 3", s, s[1], c.StemWidth)
	}
	n, h, w := s[0], s[2], s[3]
	if n < 1 || h < 1 || w < 1 {
		return fmt.Errorf("resnet: conv1: input %v is empty", s)
	}
	down := func(v, k, st, p int) int { return (v+2*p-k)/st + 1 }
	type layer struct {
		name string
		h, w int
	}
	h, w = down(h, 7, 2, 3), down(w, 7, 2, 3)
	layers := []layer{{"conv1/bn1", h, w}}
	h, w = down(h, 3, 2, 1), down(w, 3, 2, 1)
	layers = append(layers, layer{"maxpool", h, w})
	for st := 1; st < 4; st++ {
		h, w = down(h, 3, 2, 1), down(w, 3, 2, 1)
		layers = append(layers, layer{fmt.Sprintf("layer%d.0.bn1", st+1), h, w})
	}
	for _, l := range layers {
		if l.h < 1 || l.w < 1 {
			return fmt.Errorf("resnet: %s: input %v is too small: the feature map would be %dx%d", l.name, s, l.h, l.w)
		}
		if training && n*l.h*l.w < 2 {
			return fmt.Errorf("resnet: %s: input %v is too small for train mode: BatchNorm would see one value per channel (feature map %dx%d, batch %d)", l.name, s, l.h, l.w, n)
		}
	}
	return nil
}
