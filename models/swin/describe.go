package swin

import G "gorgonia.org/gorgonia"

// OpKind names what an op of this package computes, for another executor of the same graph
// (cuda/tape, docs/DESIGN.md §9); the op types stay unexported and DescribeOp is their one
// public face.
type OpKind int

// The kinds, with each op's inputs in order.
const (
	OpAttention          OpKind = iota + 1 // qkv [Bw, N, 3C] (channels (3, Heads, C/Heads)), table [T, Heads] -> [Bw, N, C]
	OpAttentionGrad                        // qkv, dy -> dqkv; Fwd (the probabilities it saved)
	OpAttentionTableGrad                   // dqkv (ordering only) -> dtable [T, Heads]; Fwd
	OpGatherRows                           // x -> y: row i of y (Row elements) is row Index[i] of x, zero where negative
	OpScatterAddRows                       // dy -> dx: the adjoint of OpGatherRows with the same Index
	OpToNHWC                               // [B, C, H, W] -> [B, H, W, C]
	OpToNCHW                               // [B, H, W, C] -> [B, C, H, W]
)

// OpDesc describes one op of this package: its kind and the parameters fixed when the graph
// was built. Fields a kind does not use are zero.
type OpDesc struct {
	Kind OpKind
	Fwd  G.Op

	// Attention: Bw windows of N tokens, C channels in Heads heads; the bias table has
	// TableRows rows and RelIndex (N·N entries) indexes it; Mask is nil or NW windows of
	// N·N additive values (window b uses b mod NW).
	Bw, N, C, Heads, TableRows, NW int
	RelIndex                       []int32
	Mask                           []float32

	// Gather and scatter: Index (one entry per gathered row), Row elements per row; In is
	// the gathered-from shape and Out the gathered shape (for both directions).
	Index   []int32
	Row     int
	In, Out []int

	// Permutes: the NCHW shape.
	B, H, W int
}

// DescribeOp returns the description of an op of this package, and false for any other op.
func DescribeOp(op G.Op) (OpDesc, bool) {
	switch o := op.(type) {
	case *attnOp:
		return attnDesc(OpAttention, o), true
	case *attnGradOp:
		return attnDesc(OpAttentionGrad, o.fwd), true
	case *attnTableGradOp:
		return attnDesc(OpAttentionTableGrad, o.fwd), true
	case *gatherOp:
		d := OpDesc{Kind: OpGatherRows, Index: o.idx, Row: o.row, In: o.in, Out: o.out}
		if o.scatter {
			d.Kind = OpScatterAddRows
		}
		return d, true
	case *permuteOp:
		d := OpDesc{Kind: OpToNHWC, B: o.b, C: o.c, H: o.h, W: o.w}
		if o.back {
			d.Kind = OpToNCHW
		}
		return d, true
	}
	return OpDesc{}, false
}

func attnDesc(k OpKind, f *attnOp) OpDesc {
	return OpDesc{Kind: k, Fwd: f, Bw: f.bw, N: f.n, C: f.c, Heads: f.heads, TableRows: f.tRows, NW: f.nW, RelIndex: f.relIdx, Mask: f.mask}
}
