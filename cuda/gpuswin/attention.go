package gpuswin

import (
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/models/swin"
)

// attention is ShiftedWindowAttention on rows x [B*H*W, C]: one gather pads, rolls and
// partitions into windows [B*nW*N, C]; qkv Linear; q, k, v split per head by a permutation
// to [3, B*nW, heads, N, d]; scores scale·Q·Kᵀ by a batched GEMM; plus the relative-position
// bias (the table's rows gathered through the index, permuted to [heads, N*N]) and, for
// shifted windows, the mask; softmax; P·V; heads merged back to [B*nW*N, C]; proj Linear;
// one gather reverses the windows, rolls back and crops.
func (s *Swin) attention(t *tape, x *cuda.Tensor, prefix string, batch, h, w, dim, heads, shift int) (*cuda.Tensor, backFn, error) {
	win := s.cfg.Window
	g := swin.NewGeometry(h, w, win, shift)
	n, nW, hd := win*win, g.Windows(), dim/heads
	bw := batch * nW
	tableName := prefix + ".relative_position_bias_table"
	table, err := s.param(tableName)
	if err != nil {
		return nil, nil, err
	}
	rel, ok := s.rel[prefix+".relative_position_index"]
	if !ok {
		return nil, nil, fmt.Errorf("gpuswin: no buffer %s.relative_position_index", prefix)
	}
	if ts := table.Shape(); len(ts) != 2 || ts[1] != heads || rel.Len() != n*n || heads*hd != dim {
		return nil, nil, fmt.Errorf("gpuswin: %s: bias table %v and %d index entries for %d heads, %d channels, window %d",
			prefix, ts, rel.Len(), heads, dim, win)
	}
	sh, sw := g.Shift()
	sft := sh<<16 | sw
	part, err := s.index(geomKey{kind: 'p', batch: batch, h: h, w: w, win: win, sft: sft}, func() []int32 { return g.Partition(batch) })
	if err != nil {
		return nil, nil, err
	}
	rev, err := s.index(geomKey{kind: 'r', batch: batch, h: h, w: w, win: win, sft: sft}, func() []int32 { return g.Reverse(batch) })
	if err != nil {
		return nil, nil, err
	}
	var mask *cuda.Tensor
	if g.Shifted() {
		if mask, err = s.maskTensor(g, h, w, win); err != nil {
			return nil, nil, err
		}
	}
	return chain(x,
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.gather(t, x, part, dim, prefix+" window partition", bw*n, dim)
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.linear(t, x, prefix+".qkv", true) },
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.permute(t, x, []int{bw, n, 3, heads, hd}, []int{2, 0, 3, 1, 4}, []int{3, bw, heads, n, hd})
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.windowCore(t, x, table, rel, mask, prefix, tableName, bw, nW, heads, n, hd)
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.permute(t, x, []int{bw, heads, n, hd}, []int{0, 2, 1, 3}, []int{bw * n, dim})
		},
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) { return s.linear(t, x, prefix+".proj", true) },
		func(x *cuda.Tensor) (*cuda.Tensor, backFn, error) {
			return s.gather(t, x, rev, dim, prefix+" window reverse", batch*h*w, dim)
		})
}

// windowCore maps q, k, v [3, B*nW, heads, N, d] to softmax(scale·Q·Kᵀ + bias + mask)·V
// [B*nW, heads, N, d]. Its backward writes the bias table's gradient.
func (s *Swin) windowCore(t *tape, qkv, table, rel, mask *cuda.Tensor, prefix, tableName string, bw, nW, heads, n, hd int) (*cuda.Tensor, backFn, error) {
	d := s.st.Dev
	scale := float32(1 / math.Sqrt(float64(hd)))
	b := bw * heads
	m := b * n * hd
	q, k, v := t.View(qkv, 0, b, n, hd), t.View(qkv, m, b, n, hd), t.View(qkv, 2*m, b, n, hd)
	scores := t.Alloc(cuda.Float32, b, n, n)
	rows := t.Alloc(cuda.Float32, n*n, heads)
	bias := t.Alloc(cuda.Float32, heads, n*n)
	p := t.Alloc(cuda.Float32, b, n, n)
	o := t.Alloc(cuda.Float32, bw, heads, n, hd)
	ov := t.View(o, 0, b, n, hd)
	if t.Err != nil {
		return nil, nil, t.Err
	}
	err := do(func() error { return d.MatMulBatched(scores, q, k, false, true, scale, 0) },
		func() error { return d.GatherRows(rows, table, rel, heads) },
		func() error { return d.Permute(bias, rows, 1, 0) },
		func() error { return d.AddBroadcast(scores, scores, bias, heads, 1, n*n) },
		func() error {
			if mask == nil {
				return nil
			}
			return d.AddBroadcast(scores, scores, mask, nW, heads, n*n)
		},
		func() error { return d.Softmax(p, scores) },
		func() error { return d.MatMulBatched(ov, p, v, false, false, 1, 0) })
	if err != nil {
		return nil, nil, fmt.Errorf("gpuswin: %s attention on %d windows of %d tokens, %d heads: %w", prefix, bw, n, heads, err)
	}
	return o, func(dy *cuda.Tensor) (*cuda.Tensor, error) {
		dqkv := t.Alloc(cuda.Float32, qkv.Shape()...)
		dq, dk, dv := t.View(dqkv, 0, b, n, hd), t.View(dqkv, m, b, n, hd), t.View(dqkv, 2*m, b, n, hd)
		do3 := t.View(dy, 0, b, n, hd)
		dp := t.Alloc(cuda.Float32, b, n, n)
		ds := t.Alloc(cuda.Float32, b, n, n)
		dsRows := t.View(ds, 0, bw, heads*n*n)
		dbias := t.Alloc(cuda.Float32, heads, n*n)
		drows := t.Alloc(cuda.Float32, n*n, heads)
		if t.Err != nil {
			return nil, t.Err
		}
		dtable := s.st.Grad[tableName]
		err := do(func() error { return d.MatMulBatched(dv, p, do3, true, false, 1, 0) }, // dV = Pᵀ·dO
			func() error { return d.MatMulBatched(dp, do3, v, false, true, 1, 0) }, // dP = dO·Vᵀ
			func() error { return d.SoftmaxBackward(ds, p, dp) },
			func() error { return d.SumCols(dbias, dsRows) },
			func() error { return d.Permute(drows, dbias, 1, 0) },
			func() error { return d.Fill(dtable, 0) },
			func() error { return d.ScatterAddRows(dtable, drows, rel, heads) },
			func() error { return d.MatMulBatched(dq, ds, k, false, false, scale, 0) }, // dQ = s·dS·K
			func() error { return d.MatMulBatched(dk, ds, q, true, false, scale, 0) })  // dK = s·dSᵀ·Q
		if err != nil {
			return nil, fmt.Errorf("gpuswin: %s attention backward: %w", prefix, err)
		}
		return dqkv, nil
	}, nil
}
