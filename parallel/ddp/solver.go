package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

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
// Step reduces the gradients in fused buckets (BucketCapBytes, 25 MiB by default): each
// bucket is packed and its all-reduce started while the next is packed, and unpacked while
// later ones are still in flight; WithCommHook compresses float32 buckets (FP16CompressHook,
// BF16CompressHook, PowerSGDHook). The averaged gradient of the global batch is exact up to
// float32 rounding: the result equals one process stepping the global batch.
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
	buckets []solverBucket
	passes  int         // backward passes summed since the last update (BackwardPasses)
	sums    [][]float64 // per learnable, the gradient sum over those passes
	steps   int         // updates done
	checker replica.Checker
}

// gradView is one learnable of a Step: its name and views of its value and gradient.
type gradView struct {
	name     string
	w32, g32 []float32
	w64, g64 []float64
	shape    tensor.Shape
	dtype    tensor.Dtype
	bucket   int // index into Solver.buckets
	lo, hi   int // its place in the bucket's buffer
}

// solverBucket is a fused buffer of gradients of one dtype.
type solverBucket struct {
	f32  []float32
	f64  []float64
	work comm.Work
	b    Bucket // what the comm hook sees (float32 buckets)
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
	same := len(layout) == len(s.layout)
	for i := 0; same && i < len(layout); i++ {
		same = layout[i] == s.layout[i]
	}
	if !same {
		if s.passes > 0 {
			return fmt.Errorf("%s: the learnables handed to Step changed within an accumulation of %d backward passes", s.name, s.cfg.backwardPasses)
		}
		if s.g != nil {
			if err := replica.CheckDescribed(s.ctx, s.g, layout); err != nil {
				return fmt.Errorf("%s: the learnables handed to Step: %w", s.name, err)
			}
		}
		s.layout = layout
		s.layoutBuckets(views)
		return nil
	}
	for i := range views {
		views[i].bucket, views[i].lo, views[i].hi = s.views[i].bucket, s.views[i].lo, s.views[i].hi
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

// layoutBuckets assigns the learnables to buckets of at most BucketCapBytes of one dtype, in
// model order (backward has finished when Step runs, so the order only decides the fusion).
func (s *Solver) layoutBuckets(views []gradView) {
	s.buckets = s.buckets[:0]
	open := map[tensor.Dtype]int{} // dtype -> index of its open bucket
	for i := range views {
		v := &views[i]
		n, size := len(v.g32)+len(v.g64), 4
		if v.dtype == tensor.Float64 {
			size = 8
		}
		bi, ok := open[v.dtype]
		if ok {
			cur := len(s.buckets[bi].f32) + len(s.buckets[bi].f64)
			ok = cur == 0 || (cur+n)*size <= s.cfg.bucketCap
		}
		if !ok {
			s.buckets = append(s.buckets, solverBucket{})
			bi = len(s.buckets) - 1
			open[v.dtype] = bi
		}
		b := &s.buckets[bi]
		if v.dtype == tensor.Float64 {
			v.lo = len(b.f64)
			b.f64 = append(b.f64, make([]float64, n)...)
			v.hi = len(b.f64)
		} else {
			v.lo = len(b.f32)
			b.f32 = append(b.f32, make([]float32, n)...)
			v.hi = len(b.f32)
		}
		v.bucket = bi
	}
	for i := range s.buckets {
		b := &s.buckets[i]
		b.b = Bucket{Index: i, Lo: 0, Hi: len(b.f32), Grad: b.f32}
	}
	// The hooks see each float32 learnable as a parameter at its place in the bucket
	// (PowerSGD compresses the matrices among them).
	for i := range views {
		v := &views[i]
		if v.g32 == nil {
			continue
		}
		b := &s.buckets[v.bucket]
		b.b.Params = append(b.b.Params, &nn.Param{Name: v.name, Shape: []int(v.shape.Clone()),
			Data: v.w32, Grad: b.f32[v.lo:v.hi], Offset: v.lo, Index: i})
	}
	s.views = views
	s.sums = nil
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
		sum := s.sums[i]
		for j, x := range v.g32 {
			sum[j] += float64(x)
			v.g32[j] = 0
		}
		for j, x := range v.g64 {
			sum[j] += x
			v.g64[j] = 0
		}
	}
}

// reduce packs each bucket and starts its reduction, then waits for each in order and
// writes the averaged gradients back. In one process it only folds in the accumulation.
func (s *Solver) reduce() error {
	k := max(s.cfg.backwardPasses, 1)
	for bi := range s.buckets {
		b := &s.buckets[bi]
		for i, v := range s.views {
			if v.bucket != bi {
				continue
			}
			s.pack(i, b)
		}
		if s.g == nil || s.g.Size() == 1 {
			continue
		}
		if len(b.f32) > 0 {
			b.work = s.cfg.hook.Reduce(s.g, &b.b)
		} else {
			b.work = s.g.AllReduce(comm.F64(b.f64), comm.Sum)
		}
	}
	world := 1
	if s.g != nil {
		world = s.g.Size()
	}
	var first error
	for bi := range s.buckets {
		b := &s.buckets[bi]
		if b.work != nil {
			if err := b.work.Wait(s.ctx); err != nil && first == nil {
				first = fmt.Errorf("%s: reducing %s: %w", s.name, b.b.String(), err)
			}
			b.work = nil
		}
		if first != nil {
			continue
		}
		if len(b.f64) > 0 && world > 1 {
			inv := 1 / float64(world)
			for i := range b.f64 {
				b.f64[i] *= inv
			}
		}
		for _, v := range s.views {
			if v.bucket == bi {
				unpack(v, b, k)
			}
		}
	}
	s.passes = 0
	for i := range s.sums {
		clear(s.sums[i])
	}
	return first
}

// pack copies learnable i's gradient, plus its accumulated sum, into its bucket.
func (s *Solver) pack(i int, b *solverBucket) {
	v := s.views[i]
	var sum []float64
	if s.passes > 0 && s.sums != nil {
		sum = s.sums[i]
	}
	if v.g32 != nil {
		dst := b.f32[v.lo:v.hi]
		if sum == nil {
			copy(dst, v.g32)
			return
		}
		for j, x := range v.g32 {
			dst[j] = float32(sum[j] + float64(x))
		}
		return
	}
	dst := b.f64[v.lo:v.hi]
	copy(dst, v.g64)
	for j := range sum {
		dst[j] += sum[j]
	}
}

// unpack writes the averaged gradient back, divided by the k accumulated passes.
func unpack(v gradView, b *solverBucket, k int) {
	if v.g32 != nil {
		copy(v.g32, b.f32[v.lo:v.hi])
		if k > 1 {
			inv := 1 / float32(k)
			for j := range v.g32 {
				v.g32[j] *= inv
			}
		}
		return
	}
	copy(v.g64, b.f64[v.lo:v.hi])
	if k > 1 {
		for j := range v.g64 {
			v.g64[j] /= float64(k)
		}
	}
}

// checkFinite skips the step (zeroing every gradient) when an averaged gradient is not
// finite. The averaged values are the same on every rank, so every rank decides alike.
func (s *Solver) checkFinite() error {
	bad := ""
	for _, v := range s.views {
		if bad != "" {
			break
		}
		for _, x := range v.g32 {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				bad = v.name
				break
			}
		}
		for _, x := range v.g64 {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				bad = v.name
				break
			}
		}
	}
	if bad == "" {
		return nil
	}
	for _, v := range s.views {
		clear(v.g32)
		clear(v.g64)
	}
	return fmt.Errorf("%s: %w in %s after averaging over the ranks: the step is skipped on every rank (gradients zeroed, weights unchanged)", s.name, ErrNonFiniteGrad, bad)
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
		ts[i] = replica.Tensor{Kind: "learnable", Name: v.name, F32: v.w32}
		if v.w64 != nil {
			ts[i].I64 = unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(v.w64))), len(v.w64))
		}
	}
	return ts
}

// broadcastLeaves checks that every rank's graph has the same leaves and copies rank 0's
// values to every rank, one broadcast per dtype.
func (s *Solver) broadcastLeaves(g *G.ExprGraph) error {
	if s.g == nil || s.g.Size() == 1 {
		return nil
	}
	var leaves []*G.Node
	var layout []string
	var n32, n64 int
	for _, n := range g.AllNodes() {
		if n.Op() != nil || n.Value() == nil {
			continue
		}
		v := n.Value()
		switch {
		case v.Dtype() == tensor.Float32 && data32(v) != nil:
			n32 += len(data32(v))
		case v.Dtype() == tensor.Float64 && data64(v) != nil:
			n64 += len(data64(v))
		default:
			return fmt.Errorf("%s: leaf %s holds %v %T: NewSolver copies rank 0's float32 and float64 leaves only", s.name, n.Name(), v.Dtype(), v)
		}
		leaves = append(leaves, n)
		layout = append(layout, fmt.Sprintf("leaf %s %v %v", n.Name(), []int(n.Shape()), v.Dtype()))
	}
	if err := replica.CheckDescribed(s.ctx, s.g, layout); err != nil {
		return fmt.Errorf("%s: the ranks' graphs differ: %w", s.name, err)
	}
	b32, b64 := make([]float32, 0, n32), make([]float64, 0, n64)
	for _, n := range leaves {
		b32 = append(b32, data32(n.Value())...)
		b64 = append(b64, data64(n.Value())...)
	}
	if len(b32) > 0 {
		if err := s.g.Broadcast(comm.F32(b32), 0).Wait(s.ctx); err != nil {
			return fmt.Errorf("%s: broadcast of rank 0's float32 weights: %w", s.name, err)
		}
	}
	if len(b64) > 0 {
		if err := s.g.Broadcast(comm.F64(b64), 0).Wait(s.ctx); err != nil {
			return fmt.Errorf("%s: broadcast of rank 0's float64 weights: %w", s.name, err)
		}
	}
	for _, n := range leaves {
		b32 = b32[copy(data32(n.Value()), b32):]
		b64 = b64[copy(data64(n.Value()), b64):]
	}
	return nil
}
