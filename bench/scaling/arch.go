package main

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/internal/scaling"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/models/swin"
)

// archLayer is one parameter tensor (or a weight with its bias) with its forward FLOPs per
// image, computed from the layer shapes (2 FLOPs per multiply-add).
type archLayer struct {
	name  string
	numel int
	flops float64
}

// resnetLayers lists torchvision's ResNet parameters in forward order for an image×image
// input, with torchvision's names.
func resnetLayers(c resnet.Config, image int) []archLayer {
	var ls []archLayer
	conv := func(name string, k, cin, cout, hw int) {
		ls = append(ls, archLayer{name + ".weight", k * k * cin * cout, 2 * float64(k*k*cin*cout*hw*hw)})
	}
	bn := func(name string, ch int) {
		ls = append(ls, archLayer{name + ".weight", ch, 0}, archLayer{name + ".bias", ch, 0})
	}
	hw := image / 2
	conv("conv1", 7, 3, 64, hw)
	bn("bn1", 64)
	hw /= 2 // max pool
	in := 64
	widths := [4]int{64, 128, 256, 512}
	for s, n := range c.Layers {
		w := widths[s]
		for b := range n {
			p := fmt.Sprintf("layer%d.%d", s+1, b)
			stride := 1
			if s > 0 && b == 0 {
				stride = 2
			}
			out := hw / stride
			if c.Block == resnet.Basic {
				conv(p+".conv1", 3, in, w, out)
				bn(p+".bn1", w)
				conv(p+".conv2", 3, w, w, out)
				bn(p+".bn2", w)
			} else {
				conv(p+".conv1", 1, in, w, hw)
				bn(p+".bn1", w)
				conv(p+".conv2", 3, w, w, out)
				bn(p+".bn2", w)
				conv(p+".conv3", 1, w, 4*w, out)
				bn(p+".bn3", 4*w)
			}
			exp := 1
			if c.Block == resnet.Bottleneck {
				exp = 4
			}
			if b == 0 && (stride != 1 || in != w*exp) {
				conv(p+".downsample.0", 1, in, w*exp, out)
				bn(p+".downsample.1", w*exp)
			}
			in, hw = w*exp, out
		}
	}
	classes := max(c.NumClasses, 1000)
	ls = append(ls, archLayer{"fc.weight", in * classes, 2 * float64(in*classes)}, archLayer{"fc.bias", classes, 0})
	return ls
}

// swinLayers lists a Swin Transformer's parameters in forward order for an image×image
// input (weight and bias of a linear layer together). Attention's two matrix products
// (QKᵀ and AV, 2·2·T·window²·C FLOPs per block) are charged to the block's proj layer.
func swinLayers(c swin.Config, image int) []archLayer {
	var ls []archLayer
	add := func(name string, numel int, flops float64) { ls = append(ls, archLayer{name, numel, flops}) }
	C, r, win := c.EmbedDim, image/4, 7
	add("features.0.conv", 48*C+C, 2*float64(48*C*r*r))
	add("features.0.norm", 2*C, 0)
	for s, depth := range c.Depths {
		T := float64(r * r)
		w := min(win, r)
		for b := range depth {
			p := fmt.Sprintf("stage%d.%d", s, b)
			add(p+".norm1", 2*C, 0)
			add(p+".attn.qkv", 3*C*C+3*C, 2*T*float64(3*C*C))
			add(p+".attn.relative_position_bias_table", (2*win-1)*(2*win-1)*c.Heads[s], 0)
			add(p+".attn.proj", C*C+C, 2*T*float64(C*C)+4*T*float64(w*w*C))
			add(p+".norm2", 2*C, 0)
			add(p+".mlp.0", 4*C*C+4*C, 2*T*float64(4*C*C))
			add(p+".mlp.3", 4*C*C+C, 2*T*float64(4*C*C))
		}
		if s+1 < len(c.Depths) {
			add(fmt.Sprintf("merge%d.norm", s), 8*C, 0)
			add(fmt.Sprintf("merge%d.reduction", s), 8*C*C, 2*T/4*float64(8*C*C))
			C, r = 2*C, r/2
		}
	}
	add("norm", 2*C, 0)
	classes := max(c.NumClasses, 1000)
	add("head", C*classes+classes, 2*float64(C*classes))
	return ls
}

// flopsProfile turns forward-order layers into a profile for a rank whose step of batch
// images takes stepS seconds: forward a third and backward two thirds of the compute (the
// usual 1:2 split), each layer's backward in proportion to its FLOPs, gradients fp32.
func flopsProfile(ls []archLayer, stepS float64) scaling.Profile {
	var total float64
	for _, l := range ls {
		total += l.flops
	}
	p := scaling.Profile{Forward: stepS / 3}
	for i := len(ls) - 1; i >= 0; i-- {
		p.Layers = append(p.Layers, scaling.Layer{Name: ls[i].name, Backward: stepS * 2 / 3 * ls[i].flops / total, Bytes: 4 * ls[i].numel})
	}
	return p
}

func totals(ls []archLayer) (params int, flops float64) {
	for _, l := range ls {
		params += l.numel
		flops += l.flops
	}
	return
}
