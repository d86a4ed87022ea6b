package ops

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BNState is BatchNorm's non-learnable state. The slices alias the model's buffers and stay
// float32 even when the op runs in float64. Nothing resets them: not building a TapeMachine,
// not switching modes (gorgonia v0.9.18's BatchNorm does both, docs/DESIGN.md §1).
type BNState struct {
	// RunningMean and RunningVar have one entry per channel.
	RunningMean, RunningVar []float32
	// NumBatchesTracked has length 1 and grows by one per training forward.
	NumBatchesTracked []int64
	// Momentum and Eps are PyTorch's: running = (1-momentum)·running + momentum·batch, with
	// the unbiased batch variance for RunningVar and the biased one for normalising.
	// PyTorch's momentum=None (cumulative average) is not supported.
	Momentum, Eps float64
	// Training selects batch statistics (and updates the running ones) or running
	// statistics. It is read at every forward run, so one graph can switch modes.
	Training bool
	// Reducer, when non-nil, makes the op SyncBatchNorm (training only). In the forward it
	// is handed the per-channel partials laid out as [sum(C) | sum of squares(C) | count(1)]
	// and must replace them in place with their sums over all ranks; in the backward it is
	// handed [sum of dy(C) | sum of dy·(x-mean)(C)] likewise. The gradients of gamma and beta
	// stay local (the data-parallel wrapper reduces them with the other gradients).
	Reducer StatsReducer
}

// StatsReducer sums a float64 buffer over all ranks in place (an all-reduce); see
// BNState.Reducer.
type StatsReducer interface {
	ReduceStats(buf []float64) error
}

// BatchNorm2d normalises x of shape [N,C,H,W] (or [N,C]) per channel, then scales by gamma
// and shifts by beta (both [C], or both nil for no affine transform). In training it uses
// the batch statistics and updates st's running statistics once per forward run; in eval it
// uses the running statistics, and its backward is that of the fixed affine map.
func BatchNorm2d(x, gamma, beta *G.Node, st *BNState) (*G.Node, error) {
	return batchNorm("BatchNorm2d", x, gamma, beta, st, false)
}

// batchNorm builds BatchNorm2d, followed by ReLU in the same op when relu is set.
func batchNorm(name string, x, gamma, beta *G.Node, st *BNState, relu bool) (*G.Node, error) {
	if st == nil {
		return nil, fmt.Errorf("%s: nil state", name)
	}
	nodes := []*G.Node{x}
	if (gamma == nil) != (beta == nil) {
		return nil, fmt.Errorf("%s: gamma and beta must both be given or both be nil", name)
	}
	if gamma != nil {
		nodes = append(nodes, gamma, beta)
	}
	if _, err := sameDtype(name, nodes...); err != nil {
		return nil, err
	}
	xs := x.Shape()
	if xs.Dims() != 4 && xs.Dims() != 2 {
		return nil, fmt.Errorf("%s: input %v, want [N,C,H,W] or [N,C]", name, xs)
	}
	c := xs[1]
	if gamma != nil && (!gamma.Shape().Eq(tensor.Shape{c}) || !beta.Shape().Eq(tensor.Shape{c})) {
		return nil, fmt.Errorf("%s: input %v wants gamma and beta [%d], got %v and %v", name, xs, c, gamma.Shape(), beta.Shape())
	}
	if len(st.RunningMean) != c || len(st.RunningVar) != c || len(st.NumBatchesTracked) != 1 {
		return nil, fmt.Errorf("%s: input %v wants running mean and var [%d] and num_batches_tracked [1], got %d, %d, %d",
			name, xs, c, len(st.RunningMean), len(st.RunningVar), len(st.NumBatchesTracked))
	}
	op := &bnOp{nop: newNop(name), st: st, shape: xs.Clone(), c: c, affine: gamma != nil, relu: relu}
	y, err := G.ApplyOp(op, nodes...)
	if err != nil {
		return nil, fmt.Errorf("%s: input %v: %w", name, xs, err)
	}
	return y, nil
}

// bnOp is the forward; it keeps what the backward needs (per-channel mean, 1/std and gamma
// of the last run, and whether it trained) and the gradients of gamma and beta that the
// backward computes alongside dx.
type bnOp struct {
	nop
	st     *BNState
	shape  tensor.Shape
	c      int
	affine bool
	relu   bool // BatchNormReLU: ReLU applied to the output, its mask to the gradient

	training    bool
	count       float64 // elements per channel, over all ranks when synchronised
	mean, istd  []float64
	gamma, beta []float64
	dgamma, dbb []float64
	red         []float64
	out         *tensor.Dense
}

func (op *bnOp) Arity() int {
	if op.affine {
		return 3
	}
	return 1
}

func (op *bnOp) Type() hm.Type {
	d := op.shape.Dims()
	if op.affine {
		return fnT(d, d, 1, 1)
	}
	return fnT(d, d)
}

func (op *bnOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, op.Arity()); err != nil {
		return nil, err
	}
	return op.shape.Clone(), nil
}

func (op *bnOp) Do(in ...G.Value) (G.Value, error) {
	return op.do(nil, in)
}

func (op *bnOp) UsePreallocDo(p G.Value, in ...G.Value) (G.Value, error) {
	if p == nil {
		return nil, fmt.Errorf("%s: nil preallocated value", op.name)
	}
	return op.do(p, in)
}

func (op *bnOp) do(p G.Value, in []G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), op.Arity()); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("%s: input %v, built for %v", op.name, x.Shape(), op.shape)
	}
	c := op.c
	if op.mean == nil {
		op.mean, op.istd, op.gamma = make([]float64, c), make([]float64, c), make([]float64, c)
		op.dgamma, op.dbb, op.red = make([]float64, c), make([]float64, c), make([]float64, 2*c+1)
		op.beta = make([]float64, c)
	}
	beta := op.beta
	if op.affine {
		for i, v := range in[1:] {
			d, err := denseIn(op.name, v)
			if err != nil {
				return nil, err
			}
			if !d.Shape().Eq(tensor.Shape{c}) || d.Dtype() != x.Dtype() {
				return nil, fmt.Errorf("%s: input %v wants %s [%d] %v, got %v %v", op.name, op.shape, []string{"gamma", "beta"}[i], c, x.Dtype(), d.Shape(), d.Dtype())
			}
			dst := op.gamma
			if i == 1 {
				dst = beta
			}
			if d.Dtype() == tensor.Float32 {
				widen(flat[float32](d), dst)
			} else {
				copy(dst, flat[float64](d))
			}
		}
	} else {
		fillT(op.gamma, 1)
		clear(beta)
	}
	var out *tensor.Dense
	if p != nil {
		if out, err = checkPrealloc(op.name, p, x.Dtype(), op.shape); err != nil {
			return nil, err
		}
	} else {
		out = ownedOut(&op.out, x.Dtype(), op.shape)
	}
	n, hw := op.shape[0], op.shape.TotalSize()/(op.shape[0]*c)
	st := op.st
	op.training = st.Training
	if st.Training {
		sum, sq := op.red[:c], op.red[c:2*c]
		if x.Dtype() == tensor.Float32 {
			bnSums(flat[float32](x), n, c, hw, sum, sq)
		} else {
			bnSums(flat[float64](x), n, c, hw, sum, sq)
		}
		op.red[2*c] = float64(n * hw)
		if st.Reducer != nil {
			if err := st.Reducer.ReduceStats(op.red); err != nil {
				return nil, fmt.Errorf("%s: input %v: synchronising batch statistics: %w", op.name, op.shape, err)
			}
		}
		cnt := op.red[2*c]
		if cnt <= 1 {
			return nil, fmt.Errorf("%s: input %v: expected more than 1 value per channel when training, got %v", op.name, op.shape, cnt)
		}
		op.count = cnt
		m := st.Momentum
		for ch := 0; ch < c; ch++ {
			mean := sum[ch] / cnt
			v := max(sq[ch]/cnt-mean*mean, 0)
			op.mean[ch], op.istd[ch] = mean, invSqrt(v+st.Eps)
			st.RunningMean[ch] = float32((1-m)*float64(st.RunningMean[ch]) + m*mean)
			st.RunningVar[ch] = float32((1-m)*float64(st.RunningVar[ch]) + m*v*cnt/(cnt-1))
		}
		st.NumBatchesTracked[0]++
	} else {
		for ch := 0; ch < c; ch++ {
			op.mean[ch] = float64(st.RunningMean[ch])
			op.istd[ch] = invSqrt(float64(st.RunningVar[ch]) + st.Eps)
		}
	}
	if x.Dtype() == tensor.Float32 {
		bnApply(flat[float32](x), flat[float32](out), n, c, hw, op.mean, op.istd, op.gamma, beta, op.relu)
	} else {
		bnApply(flat[float64](x), flat[float64](out), n, c, hw, op.mean, op.istd, op.gamma, beta, op.relu)
	}
	return out, nil
}

func (op *bnOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

func (op *bnOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	d := op.shape.Dims()
	gin := G.Nodes{in[0], grad}
	if op.relu {
		gin = G.Nodes{in[0], out, grad}
	}
	dx, err := G.ApplyOp(&bnGradOp{nop: newNop(op.name + "Grad"), fwd: op}, gin...)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	if !op.affine {
		return G.Nodes{dx}, nil
	}
	dg, err := G.ApplyOp(newStashOp(op.name+"GradGamma", &op.dgamma, d, op.c), dx)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	db, err := G.ApplyOp(newStashOp(op.name+"GradBeta", &op.dbb, d, op.c), dx)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx, dg, db}, nil
}

// bnGradOp computes dx from (x, dy), or (x, y, dy) after BatchNormReLU, and leaves dgamma
// and dbeta in the forward op.
type bnGradOp struct {
	nop
	fwd    *bnOp
	k      []float64 // per-channel coefficients k1, k2, k3
	sums   []float64 // [sum dy | sum dy·(x-mean)], the buffer handed to the reducer
	out    *tensor.Dense
	masked *tensor.Dense // BatchNormReLU: dy where y > 0, else 0
}

func (op *bnGradOp) Arity() int {
	if op.fwd.relu {
		return 3
	}
	return 2
}

func (op *bnGradOp) Type() hm.Type {
	d := op.fwd.shape.Dims()
	if op.fwd.relu {
		return fnT(d, d, d, d)
	}
	return fnT(d, d, d)
}

func (op *bnGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, op.Arity()); err != nil {
		return nil, err
	}
	return op.fwd.shape.Clone(), nil
}

func (op *bnGradOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), op.Arity()); err != nil {
		return nil, err
	}
	f := op.fwd
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	dy, err := denseIn(op.name, in[len(in)-1])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(f.shape) || !dy.Shape().Eq(f.shape) || x.Dtype() != dy.Dtype() {
		return nil, fmt.Errorf("%s: x %v and dy %v, built for %v", op.name, x.Shape(), dy.Shape(), f.shape)
	}
	var sel []float32 // ReLU's selector, when the sums and the apply pass mask dy as they read it
	if f.relu {
		if sel, err = op.reluSel(in[1], dy); err != nil {
			return nil, err
		}
		if sel == nil {
			if dy, err = op.reluMask(in[1], dy); err != nil {
				return nil, err
			}
		}
	}
	if f.mean == nil {
		return nil, fmt.Errorf("%s: backward before forward", op.name)
	}
	c := f.c
	n, hw := f.shape[0], f.shape.TotalSize()/(f.shape[0]*c)
	if op.k == nil {
		op.k, op.sums = make([]float64, 3*c), make([]float64, 2*c)
	}
	// Local sums of dy and dy·(x-mean) give dbeta and dgamma; dy's sum lands in dbeta directly.
	sdy, sdyx := f.dbb, op.sums[c:]
	if x.Dtype() == tensor.Float32 {
		bnGradSums(flat[float32](x), flat[float32](dy), sel, n, c, hw, f.mean, sdy, sdyx)
	} else {
		bnGradSums(flat[float64](x), flat[float64](dy), nil, n, c, hw, f.mean, sdy, sdyx)
	}
	for ch := 0; ch < c; ch++ {
		f.dgamma[ch] = sdyx[ch] * f.istd[ch]
	}
	// dx = k1·dy + k2·x + k3 per channel: the affine map in eval; in training also the
	// projection that removes dy's mean and its component along x̂.
	k1, k2, k3 := op.k[:c], op.k[c:2*c], op.k[2*c:]
	if f.training {
		if f.st.Reducer != nil {
			copy(op.sums[:c], sdy)
			if err := f.st.Reducer.ReduceStats(op.sums); err != nil {
				return nil, fmt.Errorf("%s: input %v: synchronising gradient sums: %w", op.name, f.shape, err)
			}
			sdy = op.sums[:c]
		}
		for ch := 0; ch < c; ch++ {
			g, s := f.gamma[ch], f.istd[ch]
			k1[ch] = g * s
			k2[ch] = -g * s * s * s * sdyx[ch] / f.count
			k3[ch] = -g*s*sdy[ch]/f.count - k2[ch]*f.mean[ch]
		}
	} else {
		for ch := 0; ch < c; ch++ {
			k1[ch], k2[ch], k3[ch] = f.gamma[ch]*f.istd[ch], 0, 0
		}
	}
	out := ownedOut(&op.out, x.Dtype(), f.shape)
	if x.Dtype() == tensor.Float32 {
		bnGradApply(flat[float32](x), flat[float32](dy), sel, flat[float32](out), n, c, hw, k1, k2, k3)
	} else {
		bnGradApply(flat[float64](x), flat[float64](dy), nil, flat[float64](out), n, c, hw, k1, k2, k3)
	}
	return out, nil
}
