package tape

import (
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// The ops that describe themselves in nn/ops's vocabulary (ops.Describer) for windowed
// attention, row gathers and permutes: the Swin Transformer's (models/swin), found through
// ops.Describe like nn/ops's own, so that this executor knows no model.

// constInt32 uploads an index for the program's life.
func (p *Program) constInt32(v []int32) (*cuda.Tensor, error) {
	t, err := p.dev.FromHostInt32(v, len(v))
	if err == nil {
		p.own = append(p.own, t)
	}
	return t, err
}

// lowerWindow lowers the kinds KindWindowAttention(Grad, TableGrad), KindGatherRows,
// KindScatterAddRows and KindPermute.
func (p *Program) lowerWindow(n *G.Node, d ops.Desc) (*kernel, error) {
	switch d.Kind {
	case ops.KindGatherRows, ops.KindScatterAddRows:
		idx, err := p.constInt32(d.Index)
		if err != nil {
			return nil, err
		}
		row := d.Row
		if d.Kind == ops.KindGatherRows {
			return &kernel{kernels: []string{"gather_rows_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
				return dev.GatherRows(out, x[0], idx, row)
			}}, nil
		}
		return &kernel{kernels: []string{"fill_f32", "scatter_add_rows_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			if err := dev.Fill(out, 0); err != nil {
				return err
			}
			return dev.ScatterAddRows(out, x[0], idx, row)
		}}, nil
	case ops.KindPermute:
		in, perm := d.In, d.Perm
		if !isPerm(perm, len(in)) {
			return nil, fmt.Errorf("permute of %v by %v: not a permutation of its axes", in, perm)
		}
		return &kernel{kernels: []string{"permute_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			xv, err := view(x[0], in...)
			if err != nil {
				return err
			}
			return dev.Permute(out, xv, perm...)
		}}, nil
	case ops.KindWindowAttention, ops.KindWindowAttentionGrad:
		if d.Attention == nil {
			return nil, fmt.Errorf("window attention without its shape (ops.Desc.Attention)")
		}
		return p.lowerAttention(n, d)
	case ops.KindWindowAttentionTableGrad:
		s := p.state(d.Fwd)
		return &kernel{kernels: []string{"scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, _ []*cuda.Tensor) error {
			if s.dgamma == nil {
				return fmt.Errorf("the attention backward has not run")
			}
			return dev.Scale(out, s.dgamma, 1)
		}}, nil
	}
	return nil, errNoKernel
}

// isPerm reports whether perm is a permutation of 0..rank-1.
func isPerm(perm []int, rank int) bool {
	if len(perm) != rank {
		return false
	}
	seen := make([]bool, rank)
	for _, a := range perm {
		if a < 0 || a >= rank || seen[a] {
			return false
		}
		seen[a] = true
	}
	return true
}

// attnGeom is window attention's shapes: bw windows of n tokens, heads of hd channels.
type attnGeom struct{ bw, n, c, heads, hd, nw, t int }

// splitQKV permutes qkv [Bw, N, 3, heads, hd] to [3, Bw, heads, N, hd] (a temporary) and
// returns it with q, k and v as [Bw·heads, N, hd] views.
func (g attnGeom) splitQKV(dev *cuda.Device, qkv *cuda.Tensor) (all *cuda.Tensor, q, k, v *cuda.Tensor, err error) {
	src, err := view(qkv, g.bw, g.n, 3, g.heads, g.hd)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if all, err = dev.Alloc(cuda.Float32, 3, g.bw, g.heads, g.n, g.hd); err != nil {
		return nil, nil, nil, nil, err
	}
	if err = dev.Permute(all, src, 2, 0, 3, 1, 4); err != nil {
		all.Free()
		return nil, nil, nil, nil, err
	}
	q, k, v, err = g.thirds(all)
	if err != nil {
		all.Free()
	}
	return all, q, k, v, err
}

func (g attnGeom) thirds(all *cuda.Tensor) (q, k, v *cuda.Tensor, err error) {
	b, m := g.bw*g.heads, g.bw*g.heads*g.n*g.hd
	if q, err = all.View(0, b, g.n, g.hd); err == nil {
		if k, err = all.View(m, b, g.n, g.hd); err == nil {
			v, err = all.View(2*m, b, g.n, g.hd)
		}
	}
	return q, k, v, err
}

// lowerAttention: the forward saves the probabilities; the backward computes dqkv and leaves
// the bias table's gradient for the table-gradient node (as attnGradOp on the CPU).
func (p *Program) lowerAttention(n *G.Node, desc ops.Desc) (*kernel, error) {
	d := desc.Attention
	if d.Heads <= 0 || d.C%d.Heads != 0 {
		return nil, fmt.Errorf("window attention: %d channels in %d heads", d.C, d.Heads)
	}
	g := attnGeom{bw: d.Bw, n: d.N, c: d.C, heads: d.Heads, hd: d.C / d.Heads, nw: d.NW, t: d.TableRows}
	rel, err := p.constInt32(d.RelIndex)
	if err != nil {
		return nil, err
	}
	var mask *cuda.Tensor
	if d.Mask != nil {
		if mask, err = p.dev.FromHost(d.Mask, d.NW, d.N*d.N); err != nil {
			return nil, err
		}
		p.own = append(p.own, mask)
	}
	scale := float32(1 / math.Sqrt(float64(g.hd)))
	b, nn := g.bw*g.heads, g.n*g.n
	names := []string{"permute_f32", "gather_rows_f32", "add_bcast_f32", "softmax_rows_f32", "softmax_bwd_rows_f32", "sum_axis_f32", "fill_f32", "scatter_add_rows_f32"}
	if desc.Kind == ops.KindWindowAttention {
		s := p.state(n.Op())
		return &kernel{kernels: names, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			all, q, k, v, err := g.splitQKV(dev, x[0])
			if err != nil {
				return err
			}
			defer all.Free()
			scores, err := dev.Alloc(cuda.Float32, b, g.n, g.n)
			if err != nil {
				return err
			}
			defer scores.Free()
			if err := dev.MatMulBatched(scores, q, k, false, true, scale, 0); err != nil {
				return err
			}
			if err := addBias(dev, scores, x[1], rel, g); err != nil {
				return err
			}
			if mask != nil {
				if err := dev.AddBroadcast(scores, scores, mask, g.nw, g.heads, nn); err != nil {
					return err
				}
			}
			if s.a, err = p.runAlloc(b, g.n, g.n); err != nil {
				return err
			}
			if err := dev.Softmax(s.a, scores); err != nil {
				return err
			}
			o, err := dev.Alloc(cuda.Float32, b, g.n, g.hd)
			if err != nil {
				return err
			}
			defer o.Free()
			if err := dev.MatMulBatched(o, s.a, v, false, false, 1, 0); err != nil {
				return err
			}
			o4, err := view(o, g.bw, g.heads, g.n, g.hd)
			if err != nil {
				return err
			}
			y, err := view(out, g.bw, g.n, g.heads, g.hd)
			if err != nil {
				return err
			}
			return dev.Permute(y, o4, 0, 2, 1, 3)
		}}, nil
	}
	s := p.state(desc.Fwd)
	return &kernel{kernels: names, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		if s.a == nil {
			return fmt.Errorf("the attention forward has not run")
		}
		all, q, k, v, err := g.splitQKV(dev, x[0])
		if err != nil {
			return err
		}
		defer all.Free()
		var tmps []*cuda.Tensor
		defer func() {
			for _, t := range tmps {
				t.Free()
			}
		}()
		alloc := func(shape ...int) *cuda.Tensor {
			t, e := dev.Alloc(cuda.Float32, shape...)
			if e != nil && err == nil {
				err = e
			}
			if t != nil {
				tmps = append(tmps, t)
			}
			return t
		}
		do, dall, dp, ds, dbias, drows := alloc(b, g.n, g.hd), alloc(3, g.bw, g.heads, g.n, g.hd), alloc(b, g.n, g.n), alloc(b, g.n, g.n), alloc(g.heads, nn), alloc(nn, g.heads)
		if err != nil {
			return err
		}
		dyv, err := view(x[1], g.bw, g.n, g.heads, g.hd)
		if err != nil {
			return err
		}
		do4, err := view(do, g.bw, g.heads, g.n, g.hd)
		if err != nil {
			return err
		}
		dq, dk, dv, err := g.thirds(dall)
		if err != nil {
			return err
		}
		if s.dgamma, err = p.runAlloc(g.t, g.heads); err != nil {
			return err
		}
		dsw, err := view(ds, g.bw, g.heads*nn)
		if err != nil {
			return err
		}
		dbias2, err := view(dbias, g.heads, nn)
		if err != nil {
			return err
		}
		steps := []func() error{
			func() error { return dev.Permute(do4, dyv, 0, 2, 1, 3) },
			func() error { return dev.MatMulBatched(dv, s.a, do, true, false, 1, 0) }, // dV = Pᵀ·dO
			func() error { return dev.MatMulBatched(dp, do, v, false, true, 1, 0) },   // dP = dO·Vᵀ
			func() error { return dev.SoftmaxBackward(ds, s.a, dp) },
			func() error { return dev.MatMulBatched(dq, ds, k, false, false, scale, 0) }, // dQ = s·dS·K
			func() error { return dev.MatMulBatched(dk, ds, q, true, false, scale, 0) },  // dK = s·dSᵀ·Q
			func() error { return dev.SumAxis(dbias, dsw, 1, g.bw, g.heads*nn) },
			func() error { return dev.Permute(drows, dbias2, 1, 0) },
			func() error { return dev.Fill(s.dgamma, 0) },
			func() error { return dev.ScatterAddRows(s.dgamma, drows, rel, g.heads) },
			func() error {
				y, err := view(out, g.bw, g.n, 3, g.heads, g.hd)
				if err != nil {
					return err
				}
				return dev.Permute(y, dall, 1, 3, 0, 2, 4)
			},
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}}, nil
}

// addBias adds the relative-position bias, gathered from table [T, heads] by rel, to the
// scores [Bw·heads, N, N].
func addBias(dev *cuda.Device, scores, table, rel *cuda.Tensor, g attnGeom) error {
	nn := g.n * g.n
	rows, err := dev.Alloc(cuda.Float32, nn, g.heads)
	if err != nil {
		return err
	}
	defer rows.Free()
	bias, err := dev.Alloc(cuda.Float32, g.heads, nn)
	if err != nil {
		return err
	}
	defer bias.Free()
	if err := dev.GatherRows(rows, table, rel, g.heads); err != nil {
		return err
	}
	if err := dev.Permute(bias, rows, 1, 0); err != nil {
		return err
	}
	return dev.AddBroadcast(scores, scores, bias, g.heads, 1, nn)
}
