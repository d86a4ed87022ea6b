package train_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// Every strategy's program speaks the same vocabulary.
var (
	_ train.Program    = (*nn.Program)(nil)
	_ train.Overlapped = (*ddp.Program)(nil)
	_ train.Program    = (*dp.Program)(nil)
	_ train.Program    = (*zero.Program)(nil) // no overlap: the shard update needs every reduce-scatter

	_ train.GlobalLosser = (*ddp.Program)(nil)
	_ train.GlobalLosser = (*zero.Program)(nil)
)

// The equivalence tests train gormlp's perceptron for 50 steps on a global batch of 16
// samples: one process on the whole batch, or two replicas on 8 each.
const (
	world, per, steps = 2, 8, 50
	global            = world * per
	// equivTol bounds max|a-b| / max|b| between a wrapped run and one process on the
	// global batch. The two compute the same mean gradient, but a replica's weight
	// gradient sums 8 samples and the average of two such sums rounds differently from one
	// sum of 16: a float32 rounding per step, carried through 50 steps of adaptive solvers.
	// Measured: at most 2.3e-7 (momentum; see the test's log); asserted with margin.
	equivTol = 1e-5
	// adamLR is ZeRO-3's AdamW learning rate and weight decay, on both sides.
	adamLR, adamWD = 0.01, 0.01
)

func TestMain(m *testing.M) { proctest.Main(m, "GP_TRAIN_TEST_WORKER", worker) }

// reference runs the stand-alone gorgonia program (its own graph, TapeMachine with dual
// values, solver.Step) on the global batch and returns w1 then w2.
func reference(t *testing.T, newSolver func() G.Solver) []float32 {
	t.Helper()
	p, err := gormlp.NewPlain(1, global)
	if err != nil {
		t.Fatal(err)
	}
	s := newSolver()
	for step := range steps {
		if _, err := p.Step(s, step*global); err != nil {
			t.Fatal(err)
		}
	}
	return gormlp.Weights(p.W1, p.W2)
}

// gorgonia v0.9.18's AdamW never changes the weights (see gormlp.NoOpSolvers), so the
// equivalence tests leave it out; this fails once a newer gorgonia fixes it.
func TestNoOpSolversStillNoOp(t *testing.T) {
	w1, w2 := gormlp.InitValues(1)
	for _, sv := range gormlp.NoOpSolvers {
		if d := relDiff(reference(t, sv.New), append(w1, w2...)); d != 0 {
			t.Errorf("gorgonia's %s now moves the weights (by %.3g): move it to gormlp.Solvers", sv.Name, d)
		}
	}
}

// Every solver of the equivalence tests moves the weights, so that equal results mean
// something.
func TestSolversMove(t *testing.T) {
	w1, w2 := gormlp.InitValues(1)
	for _, sv := range gormlp.Solvers {
		if d := relDiff(reference(t, sv.New), append(w1, w2...)); !(d > 1e-3) {
			t.Errorf("%s moved the weights by only %.3g in %d steps", sv.Name, d, steps)
		}
	}
}

// DDP over two real processes with each of gorgonia's solvers: the ranks end bit-identical,
// and equal to one process on the global batch within equivTol. The raw path overlaps: the
// first bucket's all-reduce starts before backward ends.
func TestGorgoniaSolversUnderDDP(t *testing.T) {
	dir := t.TempDir()
	job := proctest.Spawn(t, world, "GP_TRAIN_TEST_WORKER", "ddp", func(int) []string { return []string{"GP_TRAIN_OUT=" + dir} })
	for r, err := range job.Errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, job.Outputs[r])
		}
	}
	if !strings.Contains(job.Outputs[0], "overlap: yes") {
		t.Errorf("no all-reduce launched during backward:\n%s", job.Outputs[0])
	}
	for _, sv := range gormlp.Solvers {
		r0 := readWeights(t, filepath.Join(dir, "ddp-"+sv.Name+"-rank0.bin"))
		r1 := readWeights(t, filepath.Join(dir, "ddp-"+sv.Name+"-rank1.bin"))
		for i := range r0 {
			if math.Float32bits(r0[i]) != math.Float32bits(r1[i]) {
				t.Fatalf("%s: weight %d: rank 0 %v, rank 1 %v", sv.Name, i, r0[i], r1[i])
			}
		}
		d := relDiff(r0, reference(t, sv.New))
		t.Logf("%s: ranks bit-identical; max|ddp-one|/max|one| = %.2g", sv.Name, d)
		if !(d <= equivTol) {
			t.Errorf("%s: DDP differs from one process on the global batch by %.3g > %g", sv.Name, d, equivTol)
		}
	}
}

// DataParallel over two replicas with each solver equals one process on the global batch.
func TestGorgoniaSolversUnderDataParallel(t *testing.T) {
	ctx := context.Background()
	for _, sv := range gormlp.Solvers {
		m, err := nn.NewGraphModel(gormlp.Fixed(1, global))
		if err != nil {
			t.Fatal(err)
		}
		d, err := dp.New(m, gormlp.Build(1), dp.WithReplicas(world), dp.WithBuildOptions(nn.WithSolver(sv.New())))
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.Program(global)
		if err != nil {
			t.Fatal(err)
		}
		x, y := make([]float32, global*gormlp.In), make([]float32, global)
		for step := range steps {
			gormlp.Data(x, y, step*global, global)
			if err := feed(p, x, y); err != nil {
				t.Fatal(err)
			}
			if err := train.RunStep(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if got := p.Result().Chunks; len(got) != world {
			t.Fatalf("%s: chunks %v, want %d", sv.Name, got, world)
		}
		ls := p.Learnables()
		dd := relDiff(gormlp.Weights(ls[0], ls[1]), reference(t, sv.New))
		t.Logf("%s: max|dp-one|/max|one| = %.2g", sv.Name, dd)
		if !(dd <= equivTol) {
			t.Errorf("%s: DataParallel differs from one process on the global batch by %.3g > %g", sv.Name, dd, equivTol)
		}
		p.Close()
	}
}

// ZeRO-3 over two real processes with its AdamW equals one process stepping optim's AdamW
// on the global batch; the gathered parameters are the same on both ranks.
func TestGorgoniaGraphUnderZeRO3(t *testing.T) {
	dir := t.TempDir()
	job := proctest.Spawn(t, world, "GP_TRAIN_TEST_WORKER", "zero3", func(int) []string { return []string{"GP_TRAIN_OUT=" + dir} })
	for r, err := range job.Errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, job.Outputs[r])
		}
	}
	r0 := readWeights(t, filepath.Join(dir, "zero3-rank0.bin"))
	r1 := readWeights(t, filepath.Join(dir, "zero3-rank1.bin"))
	for i := range r0 {
		if math.Float32bits(r0[i]) != math.Float32bits(r1[i]) {
			t.Fatalf("gathered parameter %d: rank 0 %v, rank 1 %v", i, r0[i], r1[i])
		}
	}
	// One process: the same graph model, optim's AdamW, the global batch.
	m, err := nn.NewGraphModel(gormlp.Fixed(1, global))
	if err != nil {
		t.Fatal(err)
	}
	segs, err := optim.Segments(m.Params, adamWD)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewAdamW(segs, adamLR)
	if err != nil {
		t.Fatal(err)
	}
	p, err := nn.Compile(m, gormlp.Fixed(1, global), nn.WithOptimizer(opt))
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float32, global*gormlp.In), make([]float32, global)
	for step := range steps {
		gormlp.Data(x, y, step*global, global)
		if err := feed(p, x, y); err != nil {
			t.Fatal(err)
		}
		if err := train.RunStep(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	d := relDiff(r0, m.Params.Data)
	t.Logf("ZeRO-3 AdamW: ranks bit-identical; max|zero-one|/max|one| = %.2g", d)
	if !(d <= equivTol) {
		t.Errorf("ZeRO-3 differs from one process on the global batch by %.3g > %g", d, equivTol)
	}
}

// A replica whose parameter is changed behind DDP's back (here by 1e-6, one weight, on rank 1)
// fails the next periodic check (after step 9) on every rank, naming the parameter and the rank.
func TestDivergenceIsNamed(t *testing.T) {
	job := proctest.Spawn(t, world, "GP_TRAIN_TEST_WORKER", "diverge", nil)
	for r, err := range job.Errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, job.Outputs[r])
		}
		want := fmt.Sprintf("ddp: rank %d: replicas diverged after step 9: parameter w2 differs between rank 0 and rank 1 (1 of 2 tensors differ)", r)
		if !strings.Contains(job.Outputs[r], want) {
			t.Errorf("rank %d said:\n%s\nwant %q", r, job.Outputs[r], want)
		}
	}
}

// heapSteps, heapFrom and heapBound: a DDP job of 2,000 steps (two real processes) whose
// live heap grows by at most heapBound between step 1,000 (rings full, buckets rebuilt,
// first checks done) and step 2,000. What grew per step before the timeline became a ring
// was ~9 KB a step for resnet18 (70 events); this model's steps have fewer events, and a
// timeline kept whole grows the heap here by ~0.8 MB over those 1,000 steps.
const (
	heapSteps = 2000
	heapFrom  = 1000
	heapBound = 64 << 10
)

func TestLiveHeapBoundedOverLongRun(t *testing.T) {
	job := proctest.Spawn(t, world, "GP_TRAIN_TEST_WORKER", "heap", nil)
	for r, err := range job.Errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, job.Outputs[r])
		}
		var a, b uint64
		if _, err := fmt.Sscanf(job.Outputs[r][strings.Index(job.Outputs[r], "heap: "):], "heap: %d %d", &a, &b); err != nil {
			t.Fatalf("rank %d: %v in %q", r, err, job.Outputs[r])
		}
		growth := int64(b) - int64(a)
		t.Logf("rank %d: live heap %d B after step %d, %d B after step %d: %+d B", r, a, heapFrom, b, heapSteps, growth)
		if growth > heapBound {
			t.Errorf("rank %d: live heap grew by %d B over %d steps, bound %d B", r, growth, heapSteps-heapFrom, heapBound)
		}
	}
}

// liveHeap is the heap in use after collections settle.
func liveHeap() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A gorgonia solver handed to ZeRO-3 is refused at Compile, saying why.
func TestZeRO3RefusesSolver(t *testing.T) {
	ctx := context.Background()
	g := comm.NewLocalGroups(1)[0]
	m, err := nn.NewGraphModel(gormlp.Fixed(1, 4))
	if err != nil {
		t.Fatal(err)
	}
	e, err := zero.New(ctx, m, g, zero.WithOptimizer(zero.AdamW(adamLR)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Compile(gormlp.Fixed(1, 4), nn.WithSolver(G.NewAdamSolver()))
	if err == nil || !strings.Contains(err.Error(), "gorgonia solver steps whole tensors") {
		t.Fatalf("error %v, want the refusal of a solver", err)
	}
}

func worker(scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	r := g.Rank()
	out := os.Getenv("GP_TRAIN_OUT")
	// Each rank starts from other values: rank 0's (seed 1, the reference's) are broadcast.
	seed := int64(1 + 7*r)
	x, y := make([]float32, per*gormlp.In), make([]float32, per)
	run := func(p train.Program) error {
		for step := range steps {
			gormlp.Data(x, y, step*global+r*per, per)
			if err := feed(p, x, y); err != nil {
				return err
			}
			if err := p.Run(ctx); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if err := p.Step(ctx); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		return nil
	}
	switch scenario {
	case "ddp":
		overlapped := false
		for _, sv := range gormlp.Solvers {
			m, err := nn.NewGraphModel(gormlp.Fixed(seed, per))
			if err != nil {
				return err
			}
			// One bucket per learnable (w2's 64 bytes, then w1's 256), so that w2's
			// all-reduce can start while w1's gradient is still being computed.
			d, err := ddp.New(ctx, m, g, ddp.FirstBucketBytes(64), ddp.BucketCapBytes(64), ddp.LastBucketBytes(0), ddp.CheckEvery(10))
			if err != nil {
				return err
			}
			p, err := d.Compile(gormlp.Fixed(seed, per), nn.WithSolver(sv.New()))
			if err != nil {
				return err
			}
			if err := run(p); err != nil {
				return fmt.Errorf("%s: %w", sv.Name, err)
			}
			if len(d.Buckets()) != 2 {
				return fmt.Errorf("%d buckets, want 2", len(d.Buckets()))
			}
			overlapped = overlapped || launchedDuringBackward(d.Timeline().Events())
			ls := p.Learnables()
			if err := writeWeights(filepath.Join(out, fmt.Sprintf("ddp-%s-rank%d.bin", sv.Name, r)), gormlp.Weights(ls[0], ls[1])); err != nil {
				return err
			}
			p.Close()
		}
		if overlapped {
			fmt.Println("overlap: yes")
		}
	case "zero3":
		m, err := nn.NewGraphModel(gormlp.Fixed(seed, per))
		if err != nil {
			return err
		}
		e, err := zero.New(ctx, m, g, zero.WithOptimizer(zero.AdamW(adamLR)), zero.WithWeightDecay(adamWD))
		if err != nil {
			return err
		}
		defer e.Close()
		p, err := e.Compile(gormlp.Fixed(seed, per))
		if err != nil {
			return err
		}
		if err := run(p); err != nil {
			return err
		}
		all, err := e.GatherParams(ctx)
		if err != nil {
			return err
		}
		if err := writeWeights(filepath.Join(out, fmt.Sprintf("zero3-rank%d.bin", r)), all); err != nil {
			return err
		}
	case "diverge":
		// Rank 1 perturbs one weight before its 8th step; the check every 5 steps (before
		// the 10th) catches it, on both ranks, naming the tensor.
		m, err := nn.NewGraphModel(gormlp.Fixed(seed, per))
		if err != nil {
			return err
		}
		d, err := ddp.New(ctx, m, g, ddp.CheckEvery(5))
		if err != nil {
			return err
		}
		p, err := d.Compile(gormlp.Fixed(seed, per), nn.WithSolver(G.NewVanillaSolver(G.WithLearnRate(0.05))))
		if err != nil {
			return err
		}
		return untilDiverged(ctx, p, r, steps, func(step int) {
			if step == 7 && r == 1 {
				p.Learnables()[1].Value().Data().([]float32)[3] += 1e-6
			}
		})
	case "heap":
		// 2,000 steps of DDP with the default timeline ring and agreement check: the live
		// heap after step heapFrom and after the last.
		m, err := nn.NewGraphModel(gormlp.Fixed(seed, per))
		if err != nil {
			return err
		}
		d, err := ddp.New(ctx, m, g)
		if err != nil {
			return err
		}
		p, err := d.Compile(gormlp.Fixed(seed, per), nn.WithSolver(G.NewVanillaSolver(G.WithLearnRate(0.01))))
		if err != nil {
			return err
		}
		var from uint64
		for step := range heapSteps {
			gormlp.Data(x, y, (step%64)*global+r*per, per)
			if err := feed(p, x, y); err != nil {
				return err
			}
			if err := train.RunStep(ctx, p); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if step+1 == heapFrom {
				from = liveHeap()
			}
		}
		end := liveHeap()
		// Measured while the program and its DDP are still in use: the collector would
		// otherwise free them, and their timeline, before the second reading.
		runtime.KeepAlive(p)
		runtime.KeepAlive(d)
		fmt.Printf("heap: %d %d\n", from, end)
	case "constant":
		return constantWorker(ctx, g)
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	return nil
}

// launchedDuringBackward reports whether, in some step, a bucket's all-reduce started
// before that step's backward ended.
func launchedDuringBackward(evs []timeline.Event) bool {
	end := map[int]time.Time{}
	for _, e := range evs {
		if e.Name == timeline.EvBackward {
			end[e.Step] = e.End
		}
	}
	for _, e := range evs {
		if t, ok := end[e.Step]; ok && e.Name == timeline.EvAllReduce && e.Start.Before(t) {
			return true
		}
	}
	return false
}

func feed(p train.Program, x, y []float32) error {
	if err := p.SetInput("x", x); err != nil {
		return err
	}
	return p.SetInput("y", y)
}

func relDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = math.Max(m, math.Abs(float64(b[i])))
	}
	if len(a) != len(b) {
		return math.Inf(1)
	}
	return d / m
}

func writeWeights(path string, w []float32) error {
	b := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return os.WriteFile(path, b, 0o644)
}

func readWeights(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: not written", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, len(b)/4)
	for i := range w {
		w[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return w
}
