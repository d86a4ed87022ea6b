package ops

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func newBNState(c int, training bool) *BNState {
	st := &BNState{
		RunningMean: make([]float32, c), RunningVar: make([]float32, c),
		NumBatchesTracked: []int64{0}, Momentum: 0.1, Eps: 1e-5, Training: training,
	}
	for i := range st.RunningVar {
		// Non-trivial running statistics so that eval mode is not the identity.
		st.RunningMean[i] = 0.1 * float32(i+1)
		st.RunningVar[i] = 0.5 + 0.25*float32(i)
	}
	return st
}

func bnBuild(shape []int, training, affine bool) gradcheck.BuildFunc {
	return func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (G.Nodes, *G.Node, error) {
		c := shape[1]
		x := gradcheck.Input(g, dt, rng, "x", shape...)
		in := G.Nodes{x}
		var gamma, beta *G.Node
		if affine {
			gamma = gradcheck.Input(g, dt, rng, "gamma", c)
			beta = gradcheck.Input(g, dt, rng, "beta", c)
			in = append(in, gamma, beta)
		}
		y, err := BatchNorm2d(x, gamma, beta, newBNState(c, training))
		return in, y, err
	}
}

func TestNormBatchGradcheck(t *testing.T) {
	for _, shape := range [][]int{{2, 3, 4, 5}, {1, 3, 3, 3}, {3, 5, 1, 1}, {5, 4}, {2, 1, 7, 3}} {
		for _, training := range []bool{true, false} {
			for _, affine := range []bool{true, false} {
				t.Run(fmt.Sprintf("%v/train=%v/affine=%v", shape, training, affine), func(t *testing.T) {
					checkOp(t, bnBuild(shape, training, affine), gradBound)
				})
			}
		}
	}
}

// TestNormBatchRunningStats: three training forwards update the running statistics as
// PyTorch does, once per run; a new TapeMachine, an eval run and a gradient pass leave them
// alone (gorgonia's BatchNorm resets them).
func TestNormBatchRunningStats(t *testing.T) {
	const n, c, hw = 3, 2, 5
	rng := rand.New(rand.NewSource(5))
	g := G.NewGraph()
	x := gradcheck.Input(g, tensor.Float32, rng, "x", n, c, 1, hw)
	st := newBNState(c, true)
	copy(st.RunningMean, []float32{0, 0})
	copy(st.RunningVar, []float32{1, 1})
	y, err := BatchNorm2d(x, nil, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := Sum(y)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(cost, x); err != nil {
		t.Fatal(err)
	}
	xs := x.Value().Data().([]float32)
	wantMean, wantVar := []float64{0, 0}, []float64{1, 1}
	for ch := 0; ch < c; ch++ {
		var s, q float64
		for i := 0; i < n; i++ {
			for j := 0; j < hw; j++ {
				s += float64(xs[(i*c+ch)*hw+j])
			}
		}
		mean := s / (n * hw)
		for i := 0; i < n; i++ {
			for j := 0; j < hw; j++ {
				d := float64(xs[(i*c+ch)*hw+j]) - mean
				q += d * d
			}
		}
		for r := 0; r < 3; r++ {
			wantMean[ch] = 0.9*wantMean[ch] + 0.1*mean
			wantVar[ch] = 0.9*wantVar[ch] + 0.1*q/(n*hw-1)
		}
	}
	for r := 0; r < 3; r++ {
		m := G.NewTapeMachine(g) // a new machine per run: must not reset anything
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	check := func(when string) {
		t.Helper()
		if st.NumBatchesTracked[0] != 3 {
			t.Errorf("%s: num_batches_tracked %d, want 3", when, st.NumBatchesTracked[0])
		}
		for ch := 0; ch < c; ch++ {
			if math.Abs(float64(st.RunningMean[ch])-wantMean[ch]) > 1e-6 || math.Abs(float64(st.RunningVar[ch])-wantVar[ch]) > 1e-6 {
				t.Errorf("%s: channel %d running mean/var %v/%v, want %v/%v", when, ch, st.RunningMean[ch], st.RunningVar[ch], wantMean[ch], wantVar[ch])
			}
		}
	}
	check("after 3 training runs")
	m := G.NewTapeMachine(g)
	defer m.Close()
	check("after building a machine")
	st.Training = false
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	check("after an eval run")
}

// TestNormBatchEvalIsAffine: in eval the output is (x-running_mean)/sqrt(running_var+eps).
func TestNormBatchEvalIsAffine(t *testing.T) {
	g := G.NewGraph()
	x := constNode(g, tensor.Float64, "x", []float64{1, 2, 3, 4}, 2, 2)
	st := newBNState(2, false)
	y, err := BatchNorm2d(x, nil, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	defer runGraph(t, g).Close()
	got := f64s(t, y)
	for i, v := range []float64{1, 2, 3, 4} {
		ch := i % 2
		want := (v - float64(st.RunningMean[ch])) / math.Sqrt(float64(st.RunningVar[ch])+1e-5)
		if math.Abs(got[i]-want) > 1e-12 {
			t.Errorf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}

// ranks is an in-process all-reduce over n goroutine ranks, the StatsReducer of the
// SyncBatchNorm test.
type ranks struct {
	mu   sync.Mutex
	n    int
	sum  []float64
	seen int
	gen  int
	done map[int][]float64 // the sum of each finished round
	cond *sync.Cond
}

func newRanks(n int) *ranks {
	r := &ranks{n: n, done: map[int][]float64{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *ranks) ReduceStats(buf []float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == 0 {
		r.sum = make([]float64, len(buf))
	}
	for i, v := range buf {
		r.sum[i] += v
	}
	r.seen++
	gen := r.gen
	if r.seen == r.n {
		r.done[gen] = r.sum
		r.seen, r.gen = 0, r.gen+1
		r.cond.Broadcast()
	} else {
		for gen == r.gen {
			r.cond.Wait()
		}
	}
	copy(buf, r.done[gen])
	return nil
}

// TestNormBatchSync: two ranks with a Reducer each holding half the batch produce the same
// outputs, input gradients and running statistics as one BatchNorm over the whole batch,
// and gamma/beta gradients that sum to the whole batch's.
func TestNormBatchSync(t *testing.T) {
	const n, c, h, w = 4, 3, 2, 3
	rng := rand.New(rand.NewSource(9))
	xv := make([]float64, n*c*h*w)
	rv := make([]float64, n*c*h*w)
	for i := range xv {
		xv[i], rv[i] = rng.NormFloat64()+1, rng.NormFloat64()
	}
	gv := []float64{0.5, 1, 2}
	bv := []float64{0.1, 0, -1}
	type result struct {
		y, dx, dg, db []float64
		st            *BNState
	}
	run := func(lo, hi int, red StatsReducer) (res result, err error) {
		g := G.NewGraph()
		per := c * h * w
		x := constNode(g, tensor.Float64, "x", xv[lo*per:hi*per], hi-lo, c, h, w)
		r := constNode(g, tensor.Float64, "r", rv[lo*per:hi*per], hi-lo, c, h, w)
		gamma := constNode(g, tensor.Float64, "gamma", gv, c)
		beta := constNode(g, tensor.Float64, "beta", bv, c)
		res.st = newBNState(c, true)
		res.st.Reducer = red
		y, err := BatchNorm2d(x, gamma, beta, res.st)
		if err != nil {
			return res, err
		}
		prod, err := G.HadamardProd(y, r)
		if err != nil {
			return res, err
		}
		cost, err := Sum(prod)
		if err != nil {
			return res, err
		}
		grads, err := G.Grad(cost, x, gamma, beta)
		if err != nil {
			return res, err
		}
		m := G.NewTapeMachine(g)
		defer m.Close()
		if err := m.RunAll(); err != nil {
			return res, err
		}
		res.y, res.dx, res.dg, res.db = f64s(t, y), f64s(t, grads[0]), f64s(t, grads[1]), f64s(t, grads[2])
		return res, nil
	}
	whole, err := run(0, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	rk := newRanks(2)
	var parts [2]result
	var errs [2]error
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			parts[i], errs[i] = run(i*n/2, (i+1)*n/2, rk)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	cat := func(f func(result) []float64) []float64 { return append(f(parts[0]), f(parts[1])...) }
	sum := func(f func(result) []float64) []float64 {
		out := append([]float64(nil), f(parts[0])...)
		for i, v := range f(parts[1]) {
			out[i] += v
		}
		return out
	}
	for _, c := range []struct {
		name      string
		got, want []float64
	}{
		{"y", cat(func(r result) []float64 { return r.y }), whole.y},
		{"dx", cat(func(r result) []float64 { return r.dx }), whole.dx},
		{"dgamma", sum(func(r result) []float64 { return r.dg }), whole.dg},
		{"dbeta", sum(func(r result) []float64 { return r.db }), whole.db},
	} {
		if d := gradcheck.RelNorm(c.got, c.want); d > 1e-12 {
			t.Errorf("%s: rel %g between synchronised halves and the whole batch", c.name, d)
		}
	}
	for i := 0; i < 2; i++ {
		for ch := 0; ch < c; ch++ {
			if parts[i].st.RunningMean[ch] != whole.st.RunningMean[ch] || parts[i].st.RunningVar[ch] != whole.st.RunningVar[ch] {
				t.Errorf("rank %d channel %d running stats %v/%v, want %v/%v", i, ch, parts[i].st.RunningMean[ch], parts[i].st.RunningVar[ch], whole.st.RunningMean[ch], whole.st.RunningVar[ch])
			}
		}
	}
}

func TestNormBatchErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(2, 3, 4, 4), G.WithName("x"))
	x3 := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 3, 4), G.WithName("x3"))
	g4 := G.NewTensor(g, tensor.Float32, 1, G.WithShape(4), G.WithName("g4"))
	cases := []struct {
		f    func() (*G.Node, error)
		want string
	}{
		{func() (*G.Node, error) { return BatchNorm2d(x3, nil, nil, newBNState(3, true)) }, "BatchNorm2d: input (2, 3, 4), want [N,C,H,W] or [N,C]"},
		{func() (*G.Node, error) { return BatchNorm2d(x, g4, g4, newBNState(3, true)) }, "BatchNorm2d: input (2, 3, 4, 4) wants gamma and beta [3], got (4) and (4)"},
		{func() (*G.Node, error) { return BatchNorm2d(x, nil, nil, newBNState(4, true)) }, "wants running mean and var [3]"},
		{func() (*G.Node, error) { return BatchNorm2d(x, g4, nil, newBNState(3, true)) }, "both"},
	}
	for _, c := range cases {
		if _, err := c.f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
	// One value per channel cannot be normalised in training: a run-time error.
	g = G.NewGraph()
	one := constNode(g, tensor.Float32, "x", []float64{1, 2}, 1, 2)
	if _, err := BatchNorm2d(one, nil, nil, newBNState(2, true)); err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err == nil || !strings.Contains(err.Error(), "more than 1 value per channel") {
		t.Errorf("error %v, want one about 1 value per channel", err)
	}
}
