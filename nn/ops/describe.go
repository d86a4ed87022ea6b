package ops

import (
	"math"
	"strings"

	G "gorgonia.org/gorgonia"
)

// Kind names what an op of this package computes, for another executor of the same graph
// (cuda/tape runs nn's graphs on a GPU by lowering each op, docs/DESIGN.md §9). The op
// types stay unexported: Describe is their one public face, so that the executors depend
// on what an op computes, not on how the CPU computes it.
type Kind int

// The kinds, with each op's inputs in order. Backward ops name their forward (Desc.Fwd):
// state that the CPU keeps in the forward op (saved statistics, the dropout stream, the
// gamma and beta gradients) is shared through it.
const (
	KindLinear           Kind = iota + 1 // x [..., In], w [Out, In][, b [Out]] -> [..., Out]; Rows = prod(x's leading dims)
	KindLinearGradX                      // w, dy -> dx = dy·w
	KindLinearGradW                      // x, dy -> dw = dyᵀ·x
	KindBiasGrad                         // dy viewed [N, C, Inner] -> [C], summed over N and Inner
	KindConv2d                           // x, w[, b] -> y, NCHW; Conv
	KindConv2dGradX                      // w, dy -> dx
	KindConv2dGradW                      // x, dy -> dw
	KindBatchNorm                        // x[, gamma, beta]; BN, ReLU (BatchNormReLU)
	KindBatchNormGrad                    // x, dy, or x, y, dy after BatchNormReLU -> dx; Fwd
	KindLayerNorm                        // x[, gamma, beta] over the last NormDims dims; Eps
	KindLayerNormGrad                    // x, dy -> dx; Fwd
	KindNormGradGamma                    // dx (ordering only) -> the gamma gradient the norm's backward computed
	KindNormGradBeta                     // dx (ordering only) -> the beta gradient
	KindReLU                             // x -> max(x, 0)
	KindGELU                             // x -> x·Φ(x), erf form
	KindReLUGrad                         // x or y, dy -> dy where x > 0
	KindGELUGrad                         // x, dy -> dy·GELU'(x)
	KindAddReLU                          // a, b -> max(a+b, 0), one shape
	KindAdd                              // a, b -> a+b with NumPy broadcasting; A, B, Out
	KindReduce                           // x -> Σ (Mean: average) over the axes where Reduced is true; In, Out
	KindExpand                           // dy [Out] -> [In], broadcast over Reduced (divided by their count when Mean)
	KindCrossEntropy                     // logits [N, K], labels [N] (class indices as floats) -> mean loss; Smoothing
	KindCrossEntropyGrad                 // logits, labels, dloss (scalar) -> dlogits
	KindMaxPool2d                        // x -> y; Conv holds the window (no dilation, no groups)
	KindMaxPool2dGrad                    // x, dy -> dx
	KindAvgPool                          // x [N, C, H, W] -> [N, C, 1, 1]
	KindAvgPoolGrad                      // dy [N, C, 1, 1] -> [N, C, H, W]; In
	KindDropout                          // x -> x·mask/(1-p); Drop
	KindDropoutGrad                      // dy -> dy·mask/(1-p) with the forward's mask; Drop, Fwd
	KindSoftmax                          // x -> softmax (LogSoftmax: Log) over the axis of In viewed [Outer, N, Inner]
	KindSoftmaxGrad                      // y, dy -> dx; Fwd

	// Kinds that ops of other packages describe themselves as (Describer).
	KindWindowAttention          // qkv [Bw, N, 3C] (channels (3, Heads, C/Heads)), table [TableRows, Heads] -> [Bw, N, C]; Attention, In (qkv's)
	KindWindowAttentionGrad      // qkv, dy -> dqkv; Attention, Fwd (the probabilities its forward saved)
	KindWindowAttentionTableGrad // dqkv (ordering only) -> dtable [TableRows, Heads]; Attention, Fwd
	KindGatherRows               // x [In] -> y [Out]: row i of y (Row elements) is row Index[i] of x, zero where Index[i] < 0
	KindScatterAddRows           // dy [In] -> dx [Out]: the adjoint of GatherRows with the same Index and Row
	KindPermute                  // x [In] -> y [Out], contiguous: axis i of y is axis Perm[i] of x
)

// Desc describes one op: its Kind and the parameters fixed when the graph was built. Fields
// that a kind does not use are zero.
type Desc struct {
	Kind Kind
	// Fwd is a backward op's forward op (the key for state shared between the two).
	Fwd G.Op

	In, Out []int // the main input's and the output's shapes
	A, B    []int // Add's operand shapes

	Rows, InF, OutF int  // Linear: x viewed [Rows, InF], w [OutF, InF]
	Bias            bool // Linear, Conv2d: a bias input
	N, C, Inner     int  // BiasGrad: dy viewed [N, C, Inner]

	Conv ConvGeometry // Conv2d, MaxPool2d

	BN     *BNState // BatchNorm: the running statistics (host memory) and mode
	ReLU   bool     // BatchNormReLU
	Affine bool     // norms: gamma and beta inputs

	Eps      float64 // LayerNorm
	NormDims int     // LayerNorm: normalised trailing dims

	Reduced []bool // Reduce, Expand: per axis of In
	Mean    bool   // Reduce, Expand: divide by the reduced count

	Smoothing float64 // CrossEntropy: label smoothing

	Drop *DropMask // Dropout, DropPath

	Outer, Axis, Inner2 int  // Softmax: In viewed [Outer, Axis, Inner2]
	Log                 bool // LogSoftmax

	Attention *WindowAttention // WindowAttention and its grads

	Index []int32 // GatherRows, ScatterAddRows: one entry per gathered row
	Row   int     // GatherRows, ScatterAddRows: elements per row

	Perm []int // Permute
}

// ConvGeometry is a convolution's or a pooling window's static geometry: input [N, C, H, W],
// kernel KH×KW, Out channels, strides, paddings, dilations, groups and the output OH×OW.
type ConvGeometry struct {
	N, C, H, W, Out, KH, KW, SH, SW, PH, PW, DH, DW, Groups, OH, OW int
}

// DropMask is a Dropout's or DropPath's random mask, drawn as the CPU op draws it: each
// forward run takes the RNG's next stream, and element (or, for DropPath, sample) i of the
// mask is kept when Uniform53(key, i) >= P, where key = Key(stream).
type DropMask struct {
	P float64
	// Row is the number of consecutive elements that share one draw: 1 for Dropout, the
	// sample size for DropPath.
	Row int
	rng *RNG
}

// Next draws the stream of one forward run (advancing the RNG exactly as the CPU op does)
// and returns that run's mask key.
func (m *DropMask) Next() uint64 { return maskKey(m.rng.seed.Load(), m.rng.draw()) }

// Threshold is the integer form of the keep test: element i survives when
// mix64(key + i·0x9e3779b97f4a7c15) >> 11 >= Threshold (SplitMix64's finaliser), which is
// exactly the CPU's float test u >= P for u = (that value)·2⁻⁵³.
func (m *DropMask) Threshold() uint64 {
	if m.P >= 1 {
		return 1 << 53
	}
	return uint64(math.Ceil(m.P * (1 << 53)))
}

// Scale is the factor of a kept element, 1/(1-P) rounded to float32 as the CPU op's.
func (m *DropMask) Scale() float32 {
	if m.P >= 1 {
		return 0
	}
	return float32(1 / (1 - m.P))
}

// Describe returns the description of an op of this package or of an op that describes
// itself (Describer), and false for any other op.
func Describe(op G.Op) (Desc, bool) {
	switch o := op.(type) {
	case *linearOp:
		return Desc{Kind: KindLinear, In: o.xs, Out: o.ys, Rows: o.rows, InF: o.in, OutF: o.out, Bias: o.arity == 3}, true
	case *linearGradOp:
		f := o.fwd
		d := Desc{Kind: KindLinearGradX, Fwd: f, In: f.xs, Out: f.xs, Rows: f.rows, InF: f.in, OutF: f.out}
		if o.wrtW {
			d.Kind, d.Out = KindLinearGradW, []int{f.out, f.in}
		}
		return d, true
	case *biasGradOp:
		return Desc{Kind: KindBiasGrad, N: o.n, C: o.c, Inner: o.inner, Out: []int{o.c}}, true
	case *conv2dOp:
		return Desc{Kind: KindConv2d, Conv: o.g.export(o.n), Bias: o.arity == 3, Out: o.outShape()}, true
	case *convDataGradOp:
		return Desc{Kind: KindConv2dGradX, Conv: o.g.export(o.n), Out: o.outShape()}, true
	case *convFilterGradOp:
		return Desc{Kind: KindConv2dGradW, Conv: o.g.export(o.n), Out: o.outShape()}, true
	case *bnOp:
		return Desc{Kind: KindBatchNorm, In: o.shape, Out: o.shape, BN: o.st, ReLU: o.relu, Affine: o.affine, Eps: o.st.Eps}, true
	case *bnGradOp:
		f := o.fwd
		return Desc{Kind: KindBatchNormGrad, Fwd: f, In: f.shape, Out: f.shape, BN: f.st, ReLU: f.relu, Affine: f.affine, Eps: f.st.Eps}, true
	case *lnOp:
		return Desc{Kind: KindLayerNorm, In: o.shape, Out: o.shape, Eps: o.eps, NormDims: o.last.Dims(), Affine: o.affine}, true
	case *lnGradOp:
		f := o.fwd
		return Desc{Kind: KindLayerNormGrad, Fwd: f, In: f.shape, Out: f.shape, Eps: f.eps, NormDims: f.last.Dims(), Affine: f.affine}, true
	case *stashOp:
		k := KindNormGradGamma
		if strings.HasSuffix(o.name, "Beta") {
			k = KindNormGradBeta
		}
		return Desc{Kind: k, Out: o.shape}, true
	case *unaryOp:
		if o.kind == actGELU {
			return Desc{Kind: KindGELU}, true
		}
		return Desc{Kind: KindReLU}, true
	case *unaryGradOp:
		if o.kind == actGELU {
			return Desc{Kind: KindGELUGrad}, true
		}
		return Desc{Kind: KindReLUGrad}, true
	case *addReLUOp:
		return Desc{Kind: KindAddReLU, Out: o.shape}, true
	case *addOp:
		return Desc{Kind: KindAdd, A: o.a, B: o.b, Out: o.out}, true
	case *reduceOp:
		return Desc{Kind: KindReduce, In: o.in, Out: o.out, Reduced: o.red, Mean: o.mean}, true
	case *expandOp:
		return Desc{Kind: KindExpand, In: o.in, Out: o.out, Reduced: o.red, Mean: o.mean}, true
	case *ceOp:
		return Desc{Kind: KindCrossEntropy, N: o.n, C: o.k, Smoothing: o.s}, true
	case *ceGradOp:
		return Desc{Kind: KindCrossEntropyGrad, N: o.n, C: o.k, Smoothing: o.s, Out: []int{o.n, o.k}}, true
	case *maxPoolOp:
		d := Desc{Kind: KindMaxPool2d, Conv: o.g.export(o.n), Out: o.outShape()}
		if o.grad {
			d.Kind = KindMaxPool2dGrad
		}
		return d, true
	case *avgPoolOp:
		d := Desc{Kind: KindAvgPool, In: o.xs, Out: o.outShape()}
		if o.grad {
			d.Kind = KindAvgPoolGrad
		}
		return d, true
	case *dropOp:
		row := 1
		if o.rows {
			row = o.shape.TotalSize() / o.shape[0]
		}
		d := Desc{Kind: KindDropout, In: o.shape, Out: o.shape, Drop: &DropMask{P: o.p, Row: row, rng: o.rng}}
		if o.fwd != nil {
			d.Kind, d.Fwd = KindDropoutGrad, o.fwd
		}
		return d, true
	case *softmaxOp:
		return Desc{Kind: KindSoftmax, In: o.shape, Out: o.shape, Outer: o.outer, Axis: o.n, Inner2: o.inner, Log: o.log}, true
	case *softmaxGradOp:
		f := o.fwd
		return Desc{Kind: KindSoftmaxGrad, Fwd: f, In: f.shape, Out: f.shape, Outer: f.outer, Axis: f.n, Inner2: f.inner, Log: f.log}, true
	case Describer:
		return o.Describe(), true
	}
	return Desc{}, false
}

func (g convGeom) export(n int) ConvGeometry {
	return ConvGeometry{N: n, C: g.C, H: g.H, W: g.W, Out: g.Out, KH: g.KH, KW: g.KW, SH: g.SH, SW: g.SW,
		PH: g.PH, PW: g.PW, DH: g.DH, DW: g.DW, Groups: g.Groups, OH: g.OH, OW: g.OW}
}
