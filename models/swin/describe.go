package swin

import (
	"slices"

	"github.com/gorgonia-parallel/gp/nn/ops"
)

// The ops of this package describe themselves in nn/ops's vocabulary (ops.Describer), so
// that another executor of the same graph (cuda/tape, docs/DESIGN.md §9) runs them through
// ops.Describe without importing this package; the op types stay unexported.

// Describe: ops.KindWindowAttention.
func (op *attnOp) Describe() ops.Desc {
	return ops.Desc{Kind: ops.KindWindowAttention, Attention: op.attention(), In: op.qkvShape(), Out: []int{op.bw, op.n, op.c}}
}

// Describe: ops.KindWindowAttentionGrad, Fwd the forward op.
func (op *attnGradOp) Describe() ops.Desc {
	f := op.fwd
	return ops.Desc{Kind: ops.KindWindowAttentionGrad, Fwd: f, Attention: f.attention(), In: f.qkvShape(), Out: f.qkvShape()}
}

// Describe: ops.KindWindowAttentionTableGrad, Fwd the forward op.
func (op *attnTableGradOp) Describe() ops.Desc {
	f := op.fwd
	return ops.Desc{Kind: ops.KindWindowAttentionTableGrad, Fwd: f, Attention: f.attention(), In: f.qkvShape(), Out: []int{f.tRows, f.heads}}
}

// Describe: ops.KindGatherRows, or ops.KindScatterAddRows for the adjoint (from the
// gathered shape back to the gathered-from one).
func (op *gatherOp) Describe() ops.Desc {
	from, to := slices.Clone([]int(op.in)), slices.Clone([]int(op.out))
	if op.scatter {
		return ops.Desc{Kind: ops.KindScatterAddRows, Index: op.idx, Row: op.row, In: to, Out: from}
	}
	return ops.Desc{Kind: ops.KindGatherRows, Index: op.idx, Row: op.row, In: from, Out: to}
}

// Describe: ops.KindPermute, NCHW to NHWC or (back) NHWC to NCHW.
func (op *permuteOp) Describe() ops.Desc {
	nchw, nhwc := []int{op.b, op.c, op.h, op.w}, []int{op.b, op.h, op.w, op.c}
	if op.back {
		return ops.Desc{Kind: ops.KindPermute, In: nhwc, Out: nchw, Perm: []int{0, 3, 1, 2}}
	}
	return ops.Desc{Kind: ops.KindPermute, In: nchw, Out: nhwc, Perm: []int{0, 2, 3, 1}}
}

func (op *attnOp) attention() *ops.WindowAttention {
	return &ops.WindowAttention{Bw: op.bw, N: op.n, C: op.c, Heads: op.heads, TableRows: op.tRows, NW: op.nW, RelIndex: op.relIdx, Mask: op.mask}
}

func (op *attnOp) qkvShape() []int { return []int{op.bw, op.n, 3 * op.c} }
