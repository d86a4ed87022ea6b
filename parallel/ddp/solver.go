package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/bucketcut"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrNonFiniteGrad is wrapped by Solver.Step's error when an averaged gradient holds a NaN
// or an infinity: the step is skipped on every rank alike (see Solver).
var ErrNonFiniteGrad = errors.New("non-finite gradient")

// Solver is a gorgonia solver whose Step first averages, over the ranks of a process group,
// the gradients it is handed, then lets the inner solver update the weights: Horovod's
// DistributedOptimizer for a plain gorgonia program, which keeps its graph, G.Grad, tape
// machine and loop. Wrapping such a program takes the group, the broadcast of rank 0's
// weights and the averaging, all three done by NewSolver and Step, plus each rank's share of
// the data:
//
//	rank, world := launchenv.Launched()
//	n := batch / world // this rank's samples per step
//	... build the graph for n samples, G.Grad, G.NewTapeMachine as before ...
//	solver, err := ddp.NewSolver(ctx, G.NewAdamSolver(G.WithLearnRate(0.01)), g)
//	if err != nil {
//		return err
//	}
//	defer solver.Close()
//	... feed samples step*batch+rank*n .. +n, vm.RunAll(), solver.Step(...) as before ...
//
// Step reduces the gradients with DDP's reducer (the one New's programs use): the float32
// gradients are packed, in the order Step is handed them, into one buffer cut into buckets
// as New cuts its parameters (a bucket closes once it holds BucketCapBytes, 25 MiB by
// default; the first bucket too), and each bucket's all-reduce is launched through the comm
// hook (WithCommHook: AllReduceHook by default, commhook.FP16Compress, BF16Compress or
// PowerSGD) as soon as it is packed, while the next is packed. Float64 gradients are
// all-reduced in float64, in buckets cut alike, without the hook. The averaged gradient of
// the global batch is exact up to float32 rounding: the result equals one process stepping
// the global batch.
//
// What the build-function path (New, Compile) does and Solver does not: it cannot start a
// reduction before backward has finished (the tape machine gives no hook), so
// communication overlaps only the packing of gradients, not backward; bench/solver measures
// the difference. Use New and Compile where that matters.
//
// The contract, where a single process has none:
//   - Every rank calls Step the same number of times, with the same learnables in the same
//     order (checked at the first Step and whenever the list changes). A rank that skips
//     Step on its own leaves the others waiting until the group's timeout.
//   - Gradient accumulation: BackwardPasses(k) makes Step add the gradients to a local sum
//     and zero them on k-1 calls out of k without updating, and average the sum over the
//     ranks and the k passes on the k-th (Horovod's backward_passes_per_step). Without it,
//     every Step reduces and updates.
//   - A skipped step: when an averaged gradient is not finite, Step zeroes every gradient,
//     leaves the weights and the inner solver's state untouched on every rank alike, and
//     returns an error wrapping ErrNonFiniteGrad naming the learnable; a loop that wants to
//     skip such steps checks errors.Is and goes on. To skip a step by choice, skip it on
//     every rank.
//   - Clipping: the inner solver's element-wise clip (G.WithClip) applies to the averaged
//     gradients, as in one process; ClipGradNorm(max) clips their global L2 norm first (as
//     torch.nn.utils.clip_grad_norm_, optim.ClipGradNorm).
//   - Every CheckEvery steps (replica.DefaultCheckEvery by default) Step checks that every
//     rank holds the same learnables, and fails with ErrDiverged naming the first that
//     differs.
//
// A Solver is used from one goroutine.
type Solver struct {
	inner G.Solver
	g     comm.Group // nil in one process that no launcher started
	owned bool       // g was made by NewSolver and is closed by Close
	ctx   context.Context
	cfg   config
	name  string

	layout  []string // the description of the learnables of the last Step
	views   []gradView
	d       *DDP        // the reducer of the float32 gradients; nil in one process
	grad64  []float64   // the float64 gradients, packed (several processes)
	ends64  []int       // where each float64 bucket ends in grad64
	passes  int         // backward passes summed since the last update (BackwardPasses)
	sums    [][]float64 // per learnable, the gradient sum over those passes
	steps   int         // updates done
	checker replica.Checker
}

// gradView is one learnable of a Step: its name, views of its value and gradient, and its
// place in the packed gradients.
type gradView struct {
	name     string
	w32, g32 []float32
	w64, g64 []float64
	shape    tensor.Shape
	dtype    tensor.Dtype
	param    *nn.Param // a float32 learnable's parameter in the reducer
	lo, hi   int       // a float64 learnable's place in grad64
}

// NewSolver wraps inner for the ranks of a process group. Without WithGroup it starts the
// group from the launcher's environment (comm.InitFromEnv: gprun, torchrun, srun, mpirun),
// and in a process that no launcher started it runs alone (world 1: Step is inner's Step,
// with BackwardPasses and ClipGradNorm still applied). When it joins a job of several ranks
// itself it also first lowers the Go runtime's monitor thread (parallel/sysmon's Lower,
// which programs otherwise call from main): without WithGroup, NewSolver is the whole of
// the program's distributed set-up (the five-line path adds nothing to main), so it does
// what a launched rank's main would do. With WithGroup the program set up the process and
// NewSolver leaves its threads alone. It then checks that every rank's graph g has the same
// leaves (nodes without an op that hold a value: the weights and the inputs, with their
// names, shapes and dtypes) and copies rank 0's values of them to every rank, so that
// weights initialised from the clock or another seed, learnable or frozen, start equal.
// Every rank calls NewSolver with the same options; ctx bounds the start and every later
// Step.
//
// Options of New that do not apply to a wrapped solver (FindUnusedParameters, StaticGraph,
// SyncBatchNorm, BroadcastBuffers, FirstBucketBytes, LastBucketBytes, NoBucketRebuild,
// TimelineSteps) are refused, naming the option.
func NewSolver(ctx context.Context, inner G.Solver, g *G.ExprGraph, opts ...Option) (*Solver, error) {
	if inner == nil {
		return nil, errors.New("ddp: NewSolver: the inner solver is nil (give G.NewAdamSolver(...) or another G.Solver)")
	}
	if g == nil {
		return nil, errors.New("ddp: NewSolver: the graph is nil (give the graph the weights were created on)")
	}
	cfg := newConfig(opts)
	if err := cfg.forSolver(); err != nil {
		return nil, err
	}
	s := &Solver{inner: inner, ctx: ctx, cfg: cfg, g: cfg.group, name: "ddp: solver"}
	s.checker.Every = cfg.checkEvery
	if s.g == nil {
		if _, world := launchenv.Launched(); world > 1 {
			if _, err := sysmon.Lower(); err != nil {
				return nil, fmt.Errorf("ddp: NewSolver: %w", err)
			}
		}
		grp, err := comm.InitFromEnv(ctx)
		switch {
		case errors.Is(err, launchenv.ErrNoLauncher):
		case err != nil:
			return nil, fmt.Errorf("ddp: NewSolver: starting the process group: %w", err)
		default:
			s.g, s.owned = grp, true
		}
	}
	if s.g != nil {
		s.name = fmt.Sprintf("ddp: solver: rank %d", s.g.Rank())
	}
	if err := s.broadcastLeaves(g); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Rank is this process's rank (0 in one process).
func (s *Solver) Rank() int {
	if s.g == nil {
		return 0
	}
	return s.g.Rank()
}

// Size is the number of ranks (1 in one process).
func (s *Solver) Size() int {
	if s.g == nil {
		return 1
	}
	return s.g.Size()
}

// Group is the process group, nil in a process that no launcher started.
func (s *Solver) Group() comm.Group { return s.g }

// Mean returns the mean of v over the ranks (v itself in one process): the global batch's
// loss from each rank's, when the ranks' batches are of equal size. It is a collective.
func (s *Solver) Mean(v float32) (float32, error) { return replica.Mean(s.ctx, s.g, v, s.name) }

// Close closes the process group when NewSolver started it.
func (s *Solver) Close() error {
	if s.owned && s.g != nil {
		s.owned = false
		return s.g.Close(context.WithoutCancel(s.ctx))
	}
	return nil
}

// Step averages the gradients of model over the ranks and steps the inner solver with them
// (see Solver for accumulation, skipped steps and clipping). It satisfies G.Solver; the
// context is NewSolver's.
func (s *Solver) Step(model []G.ValueGrad) error {
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("%s: step: %w", s.name, err)
	}
	if err := s.bind(model); err != nil {
		return err
	}
	if k := s.cfg.backwardPasses; k > 1 {
		s.passes++
		s.accumulate()
		if s.passes < k {
			return nil
		}
	}
	if err := s.reduce(); err != nil {
		return err
	}
	if err := s.checkFinite(); err != nil {
		return err
	}
	if s.cfg.clipNorm > 0 {
		if err := s.clip(); err != nil {
			return err
		}
	}
	if err := s.inner.Step(model); err != nil {
		return err
	}
	s.steps++
	if s.g != nil && s.checker.Due() {
		return s.checker.Check(s.ctx, s.g, s.replicated(), s.steps, s.name)
	}
	return nil
}

// bind takes views of model's values and gradients; when the learnables differ from the last
// Step's (or at the first), it checks that every rank hands the same ones and lays out the
// buckets.
func (s *Solver) bind(model []G.ValueGrad) error {
	views := make([]gradView, len(model))
	layout := make([]string, len(model))
	for i, vg := range model {
		v, err := viewOf(i, vg)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		views[i] = v
		layout[i] = fmt.Sprintf("learnable %s %v %v", v.name, []int(v.shape), v.dtype)
	}
	if !slices.Equal(layout, s.layout) {
		if s.passes > 0 {
			return fmt.Errorf("%s: the learnables handed to Step changed within an accumulation of %d backward passes", s.name, s.cfg.backwardPasses)
		}
		if s.g != nil {
			if err := replica.CheckDescribed(s.ctx, s.g, layout); err != nil {
				return fmt.Errorf("%s: the learnables handed to Step: %w", s.name, err)
			}
		}
		s.layout, s.views = nil, views
		if err := s.lay(); err != nil {
			return err
		}
		s.layout = layout // only a complete layout is reused by the next Step
		return nil
	}
	for i := range views {
		views[i].param, views[i].lo, views[i].hi = s.views[i].param, s.views[i].lo, s.views[i].hi
	}
	s.views = views
	return nil
}

// viewOf returns the i-th learnable's views.
func viewOf(i int, vg G.ValueGrad) (gradView, error) {
	name := fmt.Sprintf("learnable %d", i)
	if n, ok := vg.(*G.Node); ok && n.Name() != "" {
		name = n.Name()
	}
	v := gradView{name: name}
	w := vg.Value()
	gr, err := vg.Grad()
	if err != nil {
		return v, fmt.Errorf("%s has no gradient (%w): run the tape machine with G.BindDualValues on it, after G.Grad", name, err)
	}
	if w == nil || gr == nil {
		return v, fmt.Errorf("%s has no value or gradient: run the tape machine before Step", name)
	}
	v.shape, v.dtype = w.Shape().Clone(), w.Dtype()
	var ok bool
	switch v.dtype {
	case tensor.Float32:
		v.w32, v.g32, ok = data32(w), data32(gr), true
		ok = ok && v.w32 != nil && len(v.g32) == len(v.w32)
	case tensor.Float64:
		v.w64, v.g64, ok = data64(w), data64(gr), true
		ok = ok && v.w64 != nil && len(v.g64) == len(v.w64)
	}
	if !ok {
		return v, fmt.Errorf("%s is %v %v with a %T gradient: Step averages float32 and float64 learnables of matching gradients", name, v.dtype, v.shape, gr)
	}
	return v, nil
}

// data32 is v's float32 memory (a tensor's backing, or a scalar), nil for anything else.
func data32(v G.Value) []float32 { return valueData[float32, *G.F32](v, (*tensor.Dense).Float32s) }

// data64 is data32 for float64.
func data64(v G.Value) []float64 { return valueData[float64, *G.F64](v, (*tensor.Dense).Float64s) }

// valueData is v's memory of element type T: a tensor's backing (backing's view for a
// scalar Dense, whose Data is a value), or a scalar of type S (G's boxed T); nil for
// anything else.
func valueData[T float32 | float64, S *G.F32 | *G.F64](v G.Value, backing func(*tensor.Dense) []T) []T {
	switch x := v.(type) {
	case S:
		return unsafe.Slice((*T)(unsafe.Pointer(x)), 1)
	case tensor.Tensor:
		d, _ := x.Data().([]T)
		if d == nil && x.Shape().IsScalar() {
			if dense, ok := x.(*tensor.Dense); ok {
				return backing(dense)
			}
		}
		return d
	}
	return nil
}

// lay places the learnables' gradients, in model order, in one buffer per dtype, and makes
// the reducer of the float32 buffer (DDP's, over parameters at the gradients' places, which
// is what the comm hooks see) and the float64 buckets, both cut by bucketcut.BySize. In one
// process there is nothing to reduce: Step folds the accumulated passes into the gradients
// in place.
func (s *Solver) lay() error {
	s.sums, s.d, s.grad64, s.ends64 = nil, nil, nil, nil
	if s.Size() == 1 {
		return nil
	}
	var params []*nn.Param
	var sizes64, ends []int // per float64 learnable: its bytes, where it ends
	n32, n64 := 0, 0
	for i := range s.views {
		v := &s.views[i]
		if v.g32 != nil {
			v.param = &nn.Param{Name: v.name, Shape: []int(v.shape.Clone()), Data: v.w32, Offset: n32, Index: len(params)}
			params, n32 = append(params, v.param), n32+len(v.g32)
		} else {
			v.lo, v.hi, n64 = n64, n64+len(v.g64), n64+len(v.g64)
			sizes64, ends = append(sizes64, 8*len(v.g64)), append(ends, n64)
		}
	}
	c := s.cfg // no backward to follow: every bucket is cut by the cap, once
	c.firstBucket, c.lastBucket, c.rebuild, c.timelineSteps = c.bucketCap, 0, false, 0
	grad := make([]float32, n32)
	for _, p := range params {
		p.Grad = grad[p.Offset : p.Offset+p.Numel()]
	}
	d := newReducer(&nn.Model{Params: &nn.ParamSet{Params: params, Grad: grad}}, s.g, c, s.name)
	if err := d.open(); err != nil {
		return err
	}
	s.d = d
	s.grad64 = make([]float64, n64)
	for _, cut := range append(bucketcut.BySize(sizes64, c.bucketCap, c.bucketCap, 0), len(ends)) {
		if cut > 0 {
			s.ends64 = append(s.ends64, ends[cut-1])
		}
	}
	return nil
}

// accumulate adds this pass's gradients to the local sums and zeroes them, except on the
// last pass, whose gradients stay for reduce to add the sums to.
func (s *Solver) accumulate() {
	if s.sums == nil {
		s.sums = make([][]float64, len(s.views))
		for i, v := range s.views {
			s.sums[i] = make([]float64, len(v.g32)+len(v.g64))
		}
	}
	if s.passes == s.cfg.backwardPasses {
		return
	}
	for i, v := range s.views {
		drain(s.sums[i], v.g32)
		drain(s.sums[i], v.g64)
	}
}

// drain adds g to sum and zeroes g.
func drain[T float32 | float64](sum []float64, g []T) {
	for j, x := range g {
		sum[j] += float64(x)
		g[j] = 0
	}
}

// reduce packs each gradient, plus its accumulated sum, and marks it ready to the reducer,
// which launches each float32 bucket once it is packed and lands them all (finish); then
// it launches the float64 buckets, waits for them and writes the averaged gradients back, divided by the
// accumulated passes. In one process it only folds in the accumulation.
func (s *Solver) reduce() error {
	d := s.d
	if d != nil {
		d.beginStep(s.ctx, true)
	}
	refused := false
	for i, v := range s.views {
		s.pack(i)
		if d != nil && v.param != nil && !refused {
			// A refusal is kept in the step state, and finish reports it.
			refused = d.markReady(v.param) != nil
		}
	}
	var err error
	if d != nil {
		// The float64 buckets go out after finish: a comm hook may launch collectives of
		// its own from another goroutine until its bucket's work is done (PowerSGD), and
		// every rank must issue its collectives in one order.
		err = d.finish(s.ctx, nil, nil)
		works, lo := make([]comm.Work, len(s.ends64)), 0
		for i, hi := range s.ends64 {
			works[i], lo = s.g.AllReduce(comm.F64(s.grad64[lo:hi]), comm.Sum), hi
		}
		for _, w := range works {
			if werr := w.Wait(s.ctx); werr != nil {
				err = errors.Join(err, fmt.Errorf("%s: all-reduce of the float64 gradients: %w", s.name, werr))
				break
			}
		}
		inv := 1 / float64(s.Size())
		for i := range s.grad64 {
			s.grad64[i] *= inv
		}
	}
	k := max(s.cfg.backwardPasses, 1)
	s.passes = 0
	for i := range s.sums {
		clear(s.sums[i])
	}
	if err != nil {
		return err
	}
	for _, v := range s.views {
		dst32, dst64 := s.packed(v)
		copy(v.g32, dst32)
		copy(v.g64, dst64)
		if k > 1 {
			simd.Scale(v.g32, 1/float32(k))
			for j := range v.g64 {
				v.g64[j] /= float64(k)
			}
		}
	}
	return nil
}

// packed is where v's gradient is packed: its place in the reducer's buffer or in grad64,
// or the gradient itself in one process.
func (s *Solver) packed(v gradView) ([]float32, []float64) {
	switch {
	case s.d == nil:
		return v.g32, v.g64
	case v.param != nil:
		return v.param.Grad, nil
	}
	return nil, s.grad64[v.lo:v.hi]
}

// pack copies learnable i's gradient, plus its accumulated sum, to where it is packed.
func (s *Solver) pack(i int) {
	v := s.views[i]
	dst32, dst64 := s.packed(v)
	copy(dst32, v.g32)
	copy(dst64, v.g64)
	if s.passes == 0 || s.sums == nil {
		return
	}
	addSum(dst32, s.sums[i])
	addSum(dst64, s.sums[i])
}

// addSum adds sum to dst, rounding once to dst's type.
func addSum[T float32 | float64](dst []T, sum []float64) {
	for j, x := range dst {
		dst[j] = T(sum[j] + float64(x))
	}
}

// checkFinite skips the step (zeroing every gradient) when an averaged gradient is not
// finite. The averaged values are the same on every rank, so every rank decides alike.
func (s *Solver) checkFinite() error {
	for _, bad := range s.views {
		if finite(bad.g32) && finite(bad.g64) {
			continue
		}
		for _, v := range s.views {
			clear(v.g32)
			clear(v.g64)
		}
		return fmt.Errorf("%s: %w in %s after averaging over the ranks: the step is skipped on every rank (gradients zeroed, weights unchanged)", s.name, ErrNonFiniteGrad, bad.name)
	}
	return nil
}

// finite reports whether every element of x is neither NaN nor infinite.
func finite[T float32 | float64](x []T) bool {
	return !slices.ContainsFunc(x, func(e T) bool { return math.IsNaN(float64(e)) || math.IsInf(float64(e), 0) })
}

// clip scales the averaged gradients to ClipGradNorm's maximum global norm (float32 only).
func (s *Solver) clip() error {
	segs := make([]optim.Segment, 0, len(s.views))
	for _, v := range s.views {
		if v.g64 != nil {
			return fmt.Errorf("%s: ClipGradNorm: %s is float64; the norm is clipped for float32 learnables", s.name, v.name)
		}
		segs = append(segs, optim.Segment{Name: v.name, Data: v.w32, Grad: v.g32})
	}
	if _, err := optim.ClipGradNorm(segs, s.cfg.clipNorm); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// replicated lists the learnables for the agreement check.
func (s *Solver) replicated() []replica.Tensor {
	ts := make([]replica.Tensor, len(s.views))
	for i, v := range s.views {
		ts[i] = replica.Tensor{Kind: "learnable", Name: v.name, F32: v.w32, I64: bits64(v.w64)}
	}
	return ts
}

// bits64 views float64 values as int64 bits (nil for nil): the replica helpers hash and
// broadcast int64 tensors bit for bit.
func bits64(v []float64) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}

// broadcastLeaves checks that every rank's graph has the same leaves and copies rank 0's
// values to every rank (replica.Broadcaster: one broadcast per dtype).
func (s *Solver) broadcastLeaves(g *G.ExprGraph) error {
	if s.Size() == 1 {
		return nil
	}
	var leaves []*nn.Buffer
	var layout []string
	for _, n := range g.AllNodes() {
		if n.Op() != nil || n.Value() == nil {
			continue
		}
		v := n.Value()
		b := &nn.Buffer{Name: n.Name()}
		switch {
		case v.Dtype() == tensor.Float32 && data32(v) != nil:
			b.Data = data32(v)
		case v.Dtype() == tensor.Float64 && data64(v) != nil:
			b.Int64 = bits64(data64(v))
		default:
			return fmt.Errorf("%s: leaf %s holds %v %T: NewSolver copies rank 0's float32 and float64 leaves only", s.name, n.Name(), v.Dtype(), v)
		}
		leaves = append(leaves, b)
		layout = append(layout, fmt.Sprintf("leaf %s %v %v", n.Name(), []int(n.Shape()), v.Dtype()))
	}
	if err := replica.CheckDescribed(s.ctx, s.g, layout); err != nil {
		return fmt.Errorf("%s: the ranks' graphs differ: %w", s.name, err)
	}
	var b replica.Broadcaster
	return b.Buffers(s.ctx, s.g, leaves, 0, s.name)
}
