package swin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// patchEmbed is features.0: Conv2d "0" (patch x patch, stride patch), Permute "1" to
// channels-last, LayerNorm "2".
type patchEmbed struct {
	conv *nn.Conv2d
	norm *nn.LayerNorm
}

func (p *patchEmbed) Declare(s *nn.Scope) error {
	if err := s.Child("0", p.conv); err != nil {
		return err
	}
	return s.Child("2", p.norm)
}

func (p *patchEmbed) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	y, err := p.conv.Forward(b, x)
	if err != nil {
		return nil, err
	}
	if y, err = toNHWC(y); err != nil {
		return nil, fmt.Errorf("features.0.1: %w", err)
	}
	return p.norm.Forward(b, y)
}

// block is torchvision's SwinTransformerBlock on [B, H, W, C]:
// x + drop(attn(norm1(x))), then x + drop(mlp(norm2(x))).
type block struct {
	norm1, norm2 *nn.LayerNorm
	attn         *attention
	mlp          *nn.Sequential
	drop1, drop2 *nn.DropPath
	path         string
}

func newBlock(dim, heads, window, shift int, mlpRatio, dropPath float64) *block {
	hidden := int(float64(dim) * mlpRatio)
	return &block{
		norm1: &nn.LayerNorm{Shape: []int{dim}},
		norm2: &nn.LayerNorm{Shape: []int{dim}},
		attn:  &attention{dim: dim, heads: heads, window: window, shift: shift},
		mlp:   nn.Seq(linear(dim, hidden, true), &nn.GELU{}, &nn.Dropout{}, linear(hidden, dim, true), &nn.Dropout{}),
		drop1: &nn.DropPath{P: dropPath},
		drop2: &nn.DropPath{P: dropPath},
	}
}

func (k *block) Declare(s *nn.Scope) error {
	k.path = s.Path()
	for _, c := range []struct {
		name string
		m    nn.Module
	}{{"norm1", k.norm1}, {"attn", k.attn}, {"stochastic_depth", k.drop1}, {"norm2", k.norm2}, {"mlp", k.mlp}} {
		if err := s.Child(c.name, c.m); err != nil {
			return err
		}
	}
	return k.drop2.Declare(s)
}

func (k *block) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	x, err := k.residual(b, x, k.norm1, k.attn, k.drop1)
	if err != nil {
		return nil, err
	}
	return k.residual(b, x, k.norm2, k.mlp, k.drop2)
}

func (k *block) residual(b *nn.Builder, x *G.Node, norm *nn.LayerNorm, f nn.Module, drop *nn.DropPath) (*G.Node, error) {
	y, err := norm.Forward(b, x)
	if err != nil {
		return nil, err
	}
	if y, err = f.Forward(b, y); err != nil {
		return nil, err
	}
	if y, err = drop.Forward(b, y); err != nil {
		return nil, err
	}
	out, err := ops.Add(x, y)
	if err != nil {
		return nil, fmt.Errorf("%s: residual add %v + %v: %w", k.path, x.Shape(), y.Shape(), err)
	}
	return out, nil
}

// attention is torchvision's ShiftedWindowAttention: relative_position_bias_table (param),
// relative_position_index (int64 buffer), qkv and proj Linear layers.
type attention struct {
	dim, heads, window, shift int
	table                     *nn.Param
	index                     *nn.Buffer
	qkv, proj                 *nn.Linear
	path                      string
}

func (a *attention) Declare(s *nn.Scope) error {
	a.path = s.Path()
	w := a.window
	a.table = s.Param("relative_position_bias_table", []int{(2*w - 1) * (2*w - 1), a.heads}, nn.TruncNormal(0.02))
	a.index = s.Int64Buffer("relative_position_index", []int{w * w * w * w})
	for i, v := range relativePositionIndex(w) {
		a.index.Int64[i] = int64(v)
	}
	a.qkv = linear(a.dim, 3*a.dim, true)
	a.proj = linear(a.dim, a.dim, true)
	if err := s.Child("qkv", a.qkv); err != nil {
		return err
	}
	return s.Child("proj", a.proj)
}

// Forward maps [B, H, W, C] to [B, H, W, C]: pad, roll, partition (one gather), qkv, fused
// attention, proj, then reverse, roll back and crop (one gather).
func (a *attention) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if s.Dims() != 4 || s[3] != a.dim {
		return nil, fmt.Errorf("%s: input %v, want [B, H, W, %d]", a.path, s, a.dim)
	}
	batch, g := s[0], newWindowGeom(s[1], s[2], a.window, a.shift)
	n := a.window * a.window
	rel := make([]int32, len(a.index.Int64))
	for i, v := range a.index.Int64 {
		rel[i] = int32(v)
	}
	win, err := gatherRows(x, g.partition(batch), a.dim, tensor.Shape{batch * g.windows(), n, a.dim})
	if err != nil {
		return nil, fmt.Errorf("%s: window partition: %w", a.path, err)
	}
	qkv, err := a.qkv.Forward(b, win)
	if err != nil {
		return nil, err
	}
	table, err := b.Param(a.table)
	if err != nil {
		return nil, err
	}
	y, err := windowAttention(qkv, table, windowAttn{heads: a.heads, n: n, c: a.dim, relIdx: rel, nW: g.windows(), mask: g.mask()})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.path, err)
	}
	if y, err = a.proj.Forward(b, y); err != nil {
		return nil, err
	}
	if y, err = gatherRows(y, g.reverse(batch), a.dim, s); err != nil {
		return nil, fmt.Errorf("%s: window reverse: %w", a.path, err)
	}
	return y, nil
}

// patchMerging is torchvision's PatchMerging: pad to even, concatenate 2x2 neighbours into
// 4C channels, LayerNorm(4C), Linear(4C, 2C, bias=False) named "reduction".
type patchMerging struct {
	dim       int
	reduction *nn.Linear
	norm      *nn.LayerNorm
	path      string
}

func (p *patchMerging) Declare(s *nn.Scope) error {
	p.path = s.Path()
	p.reduction = linear(4*p.dim, 2*p.dim, false)
	p.norm = &nn.LayerNorm{Shape: []int{4 * p.dim}}
	if err := s.Child("reduction", p.reduction); err != nil {
		return err
	}
	return s.Child("norm", p.norm)
}

func (p *patchMerging) Forward(b *nn.Builder, x *G.Node) (*G.Node, error) {
	s := x.Shape()
	if s.Dims() != 4 || s[3] != p.dim {
		return nil, fmt.Errorf("%s: input %v, want [B, H, W, %d]", p.path, s, p.dim)
	}
	idx, h2, w2 := mergeIndex(s[0], s[1], s[2])
	y, err := gatherRows(x, idx, p.dim, tensor.Shape{s[0], h2, w2, 4 * p.dim})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.path, err)
	}
	if y, err = p.norm.Forward(b, y); err != nil {
		return nil, err
	}
	return p.reduction.Forward(b, y)
}
