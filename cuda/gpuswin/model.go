package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/models/swin"
)

// forward runs features (patch embedding, stages, PatchMerging), the final LayerNorm, the
// average pool and the head on NCHW images x, returning the logits [N, classes]. Token maps
// are rows [B*H*W, C] (channels-last, as torchvision's [B, H, W, C]).
func (s *Swin) forward(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	xs := x.Shape()
	c := s.cfg
	if len(xs) != 4 || xs[1] != 3 {
		return nil, nil, fmt.Errorf("gpuswin: features.0.0 (patch embedding): input %v, want [N, 3, H, W]", xs)
	}
	if xs[2] < c.PatchSize || xs[3] < c.PatchSize {
		return nil, nil, fmt.Errorf("gpuswin: features.0.0 (patch embedding, %dx%d stride %d): input %v is smaller than one patch",
			c.PatchSize, c.PatchSize, c.PatchSize, xs)
	}
	if len(s.drop) != sum(c.Depths) {
		return nil, nil, fmt.Errorf("gpuswin: %d stochastic-depth probabilities for depths %v", len(s.drop), c.Depths)
	}
	batch, h, w := xs[0], xs[2]/c.PatchSize, xs[3]/c.PatchSize
	scales := make([]*cuda.Tensor, 2*len(s.drop))
	if t.Train {
		var err error
		if scales, err = s.dropScales(t, batch); err != nil {
			return nil, nil, err
		}
	}
	ls := []layer{func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.patchEmbed(t, x) }}
	k := 0
	for i, depth := range c.Depths {
		dim, heads := c.EmbedDim<<i, c.Heads[i]
		for j := range depth {
			prefix := fmt.Sprintf("features.%d.%d", 2*i+1, j)
			shift := (j % 2) * (c.Window / 2)
			drop := scales[2*k : 2*k+2]
			k++
			bh, bw := h, w
			ls = append(ls, func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
				return s.block(t, x, drop, prefix, batch, bh, bw, dim, heads, shift)
			})
		}
		if i < len(c.Depths)-1 {
			prefix := fmt.Sprintf("features.%d", 2*i+2)
			bh, bw := h, w
			ls = append(ls, func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
				return s.merge(t, x, prefix, batch, bh, bw, dim)
			})
			h, w = (h+1)/2, (w+1)/2
		}
	}
	last := c.EmbedDim << (len(c.Depths) - 1)
	tokens := h * w
	ls = append(ls,
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.layerNorm(t, x, "norm") },
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.avgPool(t, x, batch, tokens, last) },
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.linear(t, x, "head", true) })
	return chain(x, ls...)
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

// patchEmbed is features.0: the patch convolution (bias added after the permutation to
// channels-last, where it is a row bias), Permute, LayerNorm "features.0.2".
func (s *Swin) patchEmbed(t *tape, x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
	const name = "features.0.0"
	w, err := s.param(name + ".weight")
	if err != nil {
		return nil, nil, err
	}
	b, err := s.param(name + ".bias")
	if err != nil {
		return nil, nil, err
	}
	xs, ws := x.Shape(), w.Shape()
	if len(ws) != 4 || ws[1] != 3 {
		return nil, nil, fmt.Errorf("gpuswin: %s: weight %v, want [C, 3, P, P]", name, ws)
	}
	p := cuda.Conv2dParams{StrideH: ws[2], StrideW: ws[3]}
	oh, ow := p.OutSize(xs[2], xs[3], ws[2], ws[3])
	n, ch := xs[0], ws[0]
	y := t.Alloc(cuda.Float32, n, ch, oh, ow)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := s.st.Dev.Conv2d(y, x, w, p, cuda.Float32); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s (weight %v) on %v: %w", name, ws, xs, err)
	}
	tok, pback, err := s.permute(t, y, []int{n, ch, oh * ow}, []int{0, 2, 1}, []int{n * oh * ow, ch})
	if err != nil {
		return nil, nil, fmt.Errorf("gpuswin: features.0.1 (permute): %w", err)
	}
	if err := s.st.Dev.AddBias(tok, b); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s bias: %w", name, err)
	}
	out, nback, err := s.layerNorm(t, tok, "features.0.2")
	if err != nil {
		return nil, nil, err
	}
	return out, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dtok, err := nback(dy)
		if err != nil {
			return nil, err
		}
		if err := s.st.Dev.SumCols(s.st.Grad[name+".bias"], dtok); err != nil {
			return nil, fmt.Errorf("gpuswin: %s bias backward: %w", name, err)
		}
		dconv, err := pback(dtok)
		if err != nil {
			return nil, fmt.Errorf("gpuswin: features.0.1 (permute) backward: %w", err)
		}
		if err := s.st.Dev.Conv2dBackward(nil, s.st.Grad[name+".weight"], dconv, x, w, p, cuda.Float32); err != nil {
			return nil, fmt.Errorf("gpuswin: %s backward: %w", name, err)
		}
		return nil, nil
	}, nil
}

// block is SwinTransformerBlock: x + drop(attn(norm1(x))), then x + drop(mlp(norm2(x))),
// the MLP being Linear, GELU, Linear (its dropouts have p = 0). drop holds the two
// stochastic-depth scales [batch] (nil: no drop).
func (s *Swin) block(t *tape, x *cuda.Tensor, drop []*cuda.Tensor, prefix string, batch, h, w, dim, heads, shift int) (*cuda.Tensor, backFn, error) {
	if xs := x.Shape(); len(xs) != 2 || xs[0] != batch*h*w || xs[1] != dim {
		return nil, nil, fmt.Errorf("gpuswin: %s: input %v, want [%d*%d*%d, %d]", prefix, xs, batch, h, w, dim)
	}
	hidden := int(float64(dim) * s.cfg.MLPRatio)
	attn := func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
		return chain(x,
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.layerNorm(t, x, prefix+".norm1") },
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
				return s.attention(t, x, prefix+".attn", batch, h, w, dim, heads, shift)
			})
	}
	mlp := func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
		return chain(x,
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.layerNorm(t, x, prefix+".norm2") },
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.linear(t, x, prefix+".mlp.0", true) },
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.gelu(t, x) },
			func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
				if xs := x.Shape(); xs[1] != hidden {
					return nil, nil, fmt.Errorf("gpuswin: %s.mlp.0: %d hidden features, want %d", prefix, xs[1], hidden)
				}
				return s.linear(t, x, prefix+".mlp.3", true)
			})
	}
	return chain(x,
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.residual(t, x, attn, drop[0], prefix+".stochastic_depth", batch)
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.residual(t, x, mlp, drop[1], prefix+".stochastic_depth", batch)
		})
}

// residual is x + drop(f(x)), drop being stochastic depth per sample in training: y scaled
// by scale [batch] (0 or 1/(1-p)) when scale is not nil.
func (s *Swin) residual(t *tape, x *cuda.Tensor, f layer, scale *cuda.Tensor, name string, batch int) (*cuda.Tensor, backFn, error) {
	y, fback, err := f(x)
	if err != nil {
		return nil, nil, err
	}
	if scale != nil {
		if err := s.st.Dev.MulBroadcast(y, y, scale, batch, y.Len()/batch, 1); err != nil {
			return nil, nil, fmt.Errorf("gpuswin: %s on %v: %w", name, y.Shape(), err)
		}
	}
	out := t.Alloc(cuda.Float32, x.Shape()...)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := s.st.Dev.Add(out, x, y); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s residual add %v + %v: %w", name, x.Shape(), y.Shape(), err)
	}
	return out, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dbranch := dy
		if scale != nil {
			if dbranch = t.Alloc(cuda.Float32, dy.Shape()...); t.Err != nil {
				return nil, t.Err
			}
			if err := s.st.Dev.MulBroadcast(dbranch, dy, scale, batch, dy.Len()/batch, 1); err != nil {
				return nil, fmt.Errorf("gpuswin: %s backward: %w", name, err)
			}
		}
		df, err := fback(dbranch)
		if err != nil {
			return nil, err
		}
		dx := t.Alloc(cuda.Float32, x.Shape()...)
		if t.Err != nil {
			return nil, t.Err
		}
		return dx, s.st.Dev.Add(dx, dy, df)
	}, nil
}

// merge is PatchMerging: the 2x2 gather (padding to even) into [B*H'*W', 4C], LayerNorm
// "norm", Linear "reduction" without bias.
func (s *Swin) merge(t *tape, x *cuda.Tensor, prefix string, batch, h, w, dim int) (*cuda.Tensor, backFn, error) {
	if xs := x.Shape(); len(xs) != 2 || xs[0] != batch*h*w || xs[1] != dim {
		return nil, nil, fmt.Errorf("gpuswin: %s (PatchMerging): input %v, want [%d*%d*%d, %d]", prefix, xs, batch, h, w, dim)
	}
	h2, w2 := (h+1)/2, (w+1)/2
	idx, err := s.index(geomKey{kind: 'g', batch: batch, h: h, w: w}, func() []int32 {
		v, _, _ := swin.MergeIndex(batch, h, w)
		return v
	})
	if err != nil {
		return nil, nil, err
	}
	return chain(x,
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.gather(t, x, idx, dim, prefix+" (PatchMerging gather)", batch*h2*w2, 4*dim)
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.layerNorm(t, x, prefix+".norm") },
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.linear(t, x, prefix+".reduction", false) })
}

// avgPool averages the tokens of rows [B*L, C] into [B, C] (torchvision's permute to NCHW and
// AdaptiveAvgPool2d(1)): a permutation to [B, C, L] and the global average pool.
func (s *Swin) avgPool(t *tape, x *cuda.Tensor, batch, tokens, dim int) (*cuda.Tensor, backFn, error) {
	nchw, pback, err := s.permute(t, x, []int{batch, tokens, dim}, []int{0, 2, 1}, []int{batch, dim, tokens, 1})
	if err != nil {
		return nil, nil, fmt.Errorf("gpuswin: avgpool on %v: %w", x.Shape(), err)
	}
	y := t.Alloc(cuda.Float32, batch, dim)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	if err := s.st.Dev.GlobalAvgPool(y, nchw); err != nil {
		return nil, nil, fmt.Errorf("gpuswin: avgpool on %v: %w", x.Shape(), err)
	}
	return y, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dn := t.Alloc(cuda.Float32, batch, dim, tokens, 1)
		if t.Err != nil {
			return nil, t.Err
		}
		if err := s.st.Dev.GlobalAvgPoolBackward(dn, dy); err != nil {
			return nil, fmt.Errorf("gpuswin: avgpool backward: %w", err)
		}
		return pback(dn)
	}, nil
}
