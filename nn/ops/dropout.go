package ops

import (
	"fmt"
	"sync/atomic"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// RNG is the seeded random source of Dropout and DropPath. It is counter-based: every
// forward run of a random op takes the next counter value, and its mask is a pure function
// of (seed, that value, element index). So the state (seed, counter) is all a checkpoint
// needs to make a resumed run draw the same masks, the backward regenerates the forward's
// mask instead of storing it, and masks do not depend on thread scheduling.
// An RNG is safe for concurrent use.
type RNG struct {
	seed, counter atomic.Uint64
	frozen        atomic.Bool
}

// NewRNG returns an RNG with the given seed and counter 0.
func NewRNG(seed uint64) *RNG {
	r := &RNG{}
	r.seed.Store(seed)
	return r
}

// State returns the seed and the counter (the number of masks drawn so far).
func (r *RNG) State() (seed, counter uint64) { return r.seed.Load(), r.counter.Load() }

// SetState restores a state returned by State.
func (r *RNG) SetState(seed, counter uint64) {
	r.seed.Store(seed)
	r.counter.Store(counter)
}

// Freeze(true) makes every forward run reuse the current counter, so each run draws the
// same masks (gradient checks evaluate the function many times and need it fixed);
// Freeze(false) restores one new mask per run.
func (r *RNG) Freeze(on bool) { r.frozen.Store(on) }

// draw returns the stream of one op's forward run.
func (r *RNG) draw() uint64 {
	if r.frozen.Load() {
		return r.counter.Load()
	}
	return r.counter.Add(1) - 1
}

// mix64 is SplitMix64's finaliser: a bijection of uint64 with good avalanche.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

const golden = 0x9e3779b97f4a7c15

// maskKey derives the key of one mask from the seed and the stream.
func maskKey(seed, stream uint64) uint64 { return mix64(seed ^ mix64(stream+golden)) }

// keep reports whether element i of the mask with the given key survives drop probability
// p: a uniform in [0,1) from 53 random bits, kept when >= p (so p=0 keeps all, p=1 none).
func keep(key uint64, i int, p float64) bool {
	u := float64(mix64(key+uint64(i)*golden)>>11) * (1.0 / (1 << 53))
	return u >= p
}

// DropPathScales returns the per-sample factors DropPath applies in the forward run that
// draws stream number stream of an RNG seeded with seed (see RNG.State): 0 for a dropped
// sample, 1/(1-p) in float32 for a kept one. Device implementations can use it to
// drop exactly the samples the CPU op drops.
func DropPathScales(seed, stream uint64, n int, p float64) []float32 {
	out := make([]float32, n)
	if p >= 1 {
		return out
	}
	key, scale := maskKey(seed, stream), float32(1/(1-p))
	for i := range out {
		if keep(key, i, p) {
			out[i] = scale
		}
	}
	return out
}

// Dropout zeroes each element of x with probability p and scales the kept ones by
// 1/(1-p), with a new mask from rng every forward run; the backward applies the same run's
// mask and scale. When training is false or p is 0 it returns x itself.
func Dropout(x *G.Node, p float64, rng *RNG, training bool) (*G.Node, error) {
	return dropNode("Dropout", x, p, rng, training, false)
}

// DropPath is stochastic depth per sample, torchvision's stochastic_depth(mode="row"): each
// slice x[i] along dim 0 is zeroed with probability p, and kept slices are scaled by
// 1/(1-p). When training is false or p is 0 it returns x itself.
func DropPath(x *G.Node, p float64, rng *RNG, training bool) (*G.Node, error) {
	return dropNode("DropPath", x, p, rng, training, true)
}

func dropNode(name string, x *G.Node, p float64, rng *RNG, training, rows bool) (*G.Node, error) {
	if _, err := nodeDtype(name, x); err != nil {
		return nil, err
	}
	if !(p >= 0 && p <= 1) {
		return nil, fmt.Errorf("%s: probability %v, want it in [0,1]", name, p)
	}
	s := x.Shape()
	if s.IsScalar() || (rows && s.Dims() < 1) {
		return nil, fmt.Errorf("%s: input %v, want a tensor", name, s)
	}
	if !training || p == 0 {
		return x, nil
	}
	if rng == nil {
		return nil, fmt.Errorf("%s: input %v: nil RNG", name, s)
	}
	op := &dropOp{nop: newNop(name), p: p, rng: rng, rows: rows, shape: s.Clone()}
	y, err := G.ApplyOp(op, x)
	if err != nil {
		return nil, fmt.Errorf("%s: input %v: %w", name, s, err)
	}
	return y, nil
}

// dropOp applies a mask; its backward (drawn = false) applies the forward's.
type dropOp struct {
	nop
	p      float64
	rng    *RNG
	rows   bool
	shape  tensor.Shape
	fwd    *dropOp // set on the backward op
	stream uint64  // the forward's stream of the last run
	out    *tensor.Dense
}

func (op *dropOp) Arity() int    { return 1 }
func (op *dropOp) Type() hm.Type { return fnT(op.shape.Dims(), op.shape.Dims()) }
func (op *dropOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if _, err := inShapes(op.name, in, 1); err != nil {
		return nil, err
	}
	return op.shape.Clone(), nil
}

func (op *dropOp) Do(in ...G.Value) (G.Value, error) {
	if err := nArity(op.name, len(in), 1); err != nil {
		return nil, err
	}
	x, err := denseIn(op.name, in[0])
	if err != nil {
		return nil, err
	}
	if !x.Shape().Eq(op.shape) {
		return nil, fmt.Errorf("%s: input %v, built for %v", op.name, x.Shape(), op.shape)
	}
	var key uint64
	if op.fwd == nil {
		op.stream = op.rng.draw()
		key = maskKey(op.rng.seed.Load(), op.stream)
	} else {
		key = maskKey(op.rng.seed.Load(), op.fwd.stream)
	}
	row := 1
	if op.rows {
		row = op.shape.TotalSize() / op.shape[0]
	}
	out := ownedOut(&op.out, x.Dtype(), op.shape)
	if x.Dtype() == tensor.Float32 {
		applyMask(flat[float32](x), flat[float32](out), key, op.p, row)
	} else {
		applyMask(flat[float64](x), flat[float64](out), key, op.p, row)
	}
	return out, nil
}

func (op *dropOp) DiffWRT(int) []bool { return []bool{true} }

func (op *dropOp) SymDiff(in G.Nodes, out, grad *G.Node) (G.Nodes, error) {
	if op.fwd != nil {
		return nil, fmt.Errorf("%s: no second derivative", op.name)
	}
	g := &dropOp{nop: newNop(op.name + "Grad"), p: op.p, rng: op.rng, rows: op.rows, shape: op.shape, fwd: op}
	dx, err := G.ApplyOp(g, grad)
	if err != nil {
		return nil, fmt.Errorf("%s backward: %w", op.name, err)
	}
	return G.Nodes{dx}, nil
}

// applyMask sets y = x·mask/(1-p), one mask draw per run of row elements; runs are split
// across threads (each run's draw depends only on its index).
func applyMask[T Float](x, y []T, key uint64, p float64, row int) {
	if p >= 1 {
		clear(y[:len(x)])
		return
	}
	scale := T(1 / (1 - p))
	splitRows(len(x)/row, row, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xs, ys := x[r*row:(r+1)*row], y[r*row:(r+1)*row]
			if keep(key, r, p) {
				if x32, ok := any(xs).([]float32); ok && row >= simdMinLen && simdScale(x32, any(ys).([]float32), float32(scale)) {
					continue
				}
				for j, v := range xs {
					ys[j] = v * scale
				}
			} else {
				clear(ys)
			}
		}
	})
}
