package swin

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/internal/simd"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// windowAttn describes one window-attention layer: heads, window tokens N, channels C, the
// relative position index (N*N entries into the bias table's rows) and the shifted-window
// mask (nW windows of N*N additive values, nil for unshifted windows).
type windowAttn struct {
	heads, n, c int
	relIdx      []int32
	nW          int
	mask        []float32
}

// windowAttention is torchvision's multi-head window attention core in one op:
//
//	qkv [Bw, N, 3C] (the qkv Linear's output, channels ordered (3, heads, C/heads)),
//	table [(2w-1)^2, heads] (relative_position_bias_table),
//	out [Bw, N, C] = concat over heads of softmax(q·kᵀ/√d + bias + mask)·v
//
// with window b using mask window b mod nW. The softmax probabilities are kept for backward.
// One pass over windows and heads, with GEMMs on strided views and no transposes: gorgonia's
// BatchedMatMul plus a softmax op per row is overhead-bound at these sizes.
func windowAttention(qkv, table *G.Node, a windowAttn) (*G.Node, error) {
	qs, ts := qkv.Shape(), table.Shape()
	if qs.Dims() != 3 || qs[1] != a.n || qs[2] != 3*a.c {
		return nil, fmt.Errorf("window attention: qkv %v, want [B*windows, %d, %d]", qs, a.n, 3*a.c)
	}
	if a.heads <= 0 || a.c%a.heads != 0 {
		return nil, fmt.Errorf("window attention: %d channels do not split into %d heads", a.c, a.heads)
	}
	if ts.Dims() != 2 || ts[1] != a.heads || len(a.relIdx) != a.n*a.n {
		return nil, fmt.Errorf("window attention: bias table %v with %d index entries, want [T, %d] and %d", ts, len(a.relIdx), a.heads, a.n*a.n)
	}
	for _, j := range a.relIdx {
		if j < 0 || int(j) >= ts[0] {
			return nil, fmt.Errorf("window attention: relative position index %d outside the bias table %v", j, ts)
		}
	}
	if a.mask != nil && (a.nW <= 0 || qs[0]%a.nW != 0 || len(a.mask) != a.nW*a.n*a.n) {
		return nil, fmt.Errorf("window attention: mask of %d values for %d windows does not fit qkv %v", len(a.mask), a.nW, qs)
	}
	op := &attnOp{opBase: newOpBase("WindowAttention"), windowAttn: a, bw: qs[0], tRows: ts[0]}
	y, err := G.ApplyOp(op, qkv, table)
	if err != nil {
		return nil, fmt.Errorf("window attention %v: %w", qs, err)
	}
	return y, nil
}

// attnOp is the forward op. It owns the probabilities P [Bw, heads, N, N] of the last run,
// which its backward ops read, and the bias gradient [heads, N, N] that attnGradOp leaves for
// attnTableGradOp.
type attnOp struct {
	opBase
	windowAttn
	bw, tRows int
	out       outBuf
	p32       []float32
	p64       []float64
	bias      []float64 // [heads, N, N] gathered from the table at each run
	dBias     []float64 // [heads, N, N], summed over windows by attnGradOp
}

func (op *attnOp) Arity() int    { return 2 }
func (op *attnOp) Type() hm.Type { return fnType(3, 3, 2) }
func (op *attnOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.bw, op.n, op.c}, nil
}

func (op *attnOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 2 {
		return nil, fmt.Errorf("%s: got %d inputs, want 2", op.name, len(vals))
	}
	qkv, err := dense(op.name, "qkv", vals[0], op.bw*op.n*3*op.c)
	if err != nil {
		return nil, err
	}
	tab, err := dense(op.name, "bias table", vals[1], op.tRows*op.heads)
	if err != nil {
		return nil, err
	}
	if qkv.Dtype() != tab.Dtype() {
		return nil, fmt.Errorf("%s: qkv is %v, bias table %v", op.name, qkv.Dtype(), tab.Dtype())
	}
	y := op.out.get(qkv.Dtype(), tensor.Shape{op.bw, op.n, op.c})
	nn := op.n * op.n
	op.bias = grow(op.bias, op.heads*nn)
	if qkv.Dtype() == tensor.Float32 {
		gatherBias(op, data[float32](tab))
		op.p32 = grow(op.p32, op.bw*op.heads*nn)
		attnForward(op, data[float32](qkv), data[float32](y), op.p32)
	} else {
		gatherBias(op, data[float64](tab))
		op.p64 = grow(op.p64, op.bw*op.heads*nn)
		attnForward(op, data[float64](qkv), data[float64](y), op.p64)
	}
	return y, nil
}

func gatherBias[T float](op *attnOp, tab []T) {
	nn := op.n * op.n
	for h := range op.heads {
		for i, j := range op.relIdx {
			op.bias[h*nn+i] = float64(tab[int(j)*op.heads+h])
		}
	}
}

// attnPerHead, when true, makes attnForward and attnBackward run their per-head loops where
// the C kernels would take whole windows: for the tests that compare the two.
var attnPerHead bool

func attnForward[T float](op *attnOp, qkv, y, p []T) {
	n, c, hd := op.n, op.c, op.c/op.heads
	nn := n * n
	scale := T(1 / math.Sqrt(float64(hd)))
	q32, whole := any(qkv).([]float32)
	y32, _ := any(y).([]float32)
	p32, _ := any(p).([]float32)
	whole = whole && !attnPerHead && simd.AttnWindowFits(n, hd)
	parallel(op.bw, func(_, lo, hi int) {
		for b := lo; b < hi; b++ {
			base := qkv[b*n*3*c:]
			var mask []float32
			if op.mask != nil {
				w := b % op.nW
				mask = op.mask[w*nn : (w+1)*nn]
			}
			// The window's heads in one call of the C kernels (the same bits as the loop).
			if whole && simd.AttnWindowFwd32(q32[b*n*3*c:], y32[b*n*c:], p32[b*op.heads*nn:], op.bias, mask, op.heads, n, c,
				float32(scale)) {
				continue
			}
			for h := range op.heads {
				q, k, v := base[h*hd:], base[c+h*hd:], base[2*c+h*hd:]
				s := p[(b*op.heads+h)*nn : (b*op.heads+h+1)*nn]
				gemm(false, true, n, n, hd, scale, q, 3*c, k, 3*c, 0, s, n)
				bias := op.bias[h*nn : (h+1)*nn]
				switch sv := any(s).(type) {
				case []float32:
					softmaxRows32(sv, bias, mask, n)
				case []float64:
					softmaxRows64(sv, bias, mask, n)
				}
				gemm(false, false, n, hd, n, 1, s, n, v, 3*c, 0, y[b*n*c+h*hd:], c)
			}
		}
	})
}

func (op *attnOp) DiffWRT(int) []bool { return []bool{true, true} }

func (op *attnOp) SymDiff(in G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	dqkv, err := G.ApplyOp(&attnGradOp{opBase: newOpBase(op.name + "Grad"), fwd: op}, in[0], grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	// The table gradient is computed by attnGradOp; this op only scatters it into the table's
	// layout. Taking dqkv as input orders it after attnGradOp on the tape.
	dtab, err := G.ApplyOp(&attnTableGradOp{opBase: newOpBase(op.name + "TableGrad"), fwd: op}, dqkv)
	if err != nil {
		return nil, fmt.Errorf("%s backward (bias table): %w", op.name, err)
	}
	return G.Nodes{dqkv, dtab}, nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
