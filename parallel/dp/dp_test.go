package dp

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

const (
	classes = 5
	side    = 6
)

// convNet is conv -> ReLU -> conv -> ReLU -> global pool -> linear, without BatchNorm.
func convNet() nn.Module {
	return nn.Seq(
		&nn.Conv2d{In: 3, Out: 6, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}, Bias: true},
		&nn.ReLU{},
		&nn.Conv2d{In: 6, Out: 8, Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Bias: true},
		&nn.ReLU{},
		&nn.AdaptiveAvgPool2d{},
		&nn.Flatten{},
		&nn.Linear{In: 8, Out: classes},
	)
}

// bnNet is conv -> BatchNorm -> ReLU -> global pool -> linear.
func bnNet() nn.Module {
	return nn.Seq(
		&nn.Conv2d{In: 3, Out: 4, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
		&nn.BatchNorm2d{C: 4},
		&nn.ReLU{},
		&nn.AdaptiveAvgPool2d{},
		&nn.Flatten{},
		&nn.Linear{In: 4, Out: classes},
	)
}

// classify builds images [n,3,side,side] and labels [n] into logits and the mean
// cross-entropy.
func classify(b *nn.Builder, n int) (*G.Node, error) {
	x, err := b.Input("images", n, 3, side, side)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("labels", n)
	if err != nil {
		return nil, err
	}
	logits, err := b.Forward(x)
	if err != nil {
		return nil, err
	}
	b.Output("logits", logits)
	if !b.Training() {
		return nil, nil
	}
	return ops.CrossEntropy(logits, y, 0)
}

func newModel(t *testing.T, root nn.Module) *nn.Model {
	t.Helper()
	m, err := nn.NewModel(root, nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func batch(seed int64, n int) Batch {
	rng := rand.New(rand.NewSource(seed))
	x := make([]float32, n*3*side*side)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, n)
	for i := range y {
		y[i] = float32(rng.Intn(classes))
	}
	return Batch{N: n, Inputs: map[string][]float32{"images": x, "labels": y}}
}

// reference runs one program on the whole batch: the single-replica result.
type reference struct {
	m   *nn.Model
	p   *nn.Program
	opt optim.Optimizer
}

func newReference(t *testing.T, root nn.Module, n int) *reference {
	m := newModel(t, root)
	p, err := nn.Compile(m, func(b *nn.Builder) (*G.Node, error) { return classify(b, n) })
	if err != nil {
		t.Fatal(err)
	}
	return &reference{m: m, p: p, opt: sgd(t, m)}
}

func (r *reference) step(t *testing.T, b Batch) (loss float32, logits []float32) {
	t.Helper()
	r.opt.ZeroGrad()
	for name, v := range b.Inputs {
		if err := r.p.SetInput(name, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	loss, _ = r.p.LossValue()
	out, _ := r.p.Output("logits")
	logits = slices.Clone(out)
	if err := r.opt.Step(); err != nil {
		t.Fatal(err)
	}
	return loss, logits
}

func sgd(t *testing.T, m *nn.Model) optim.Optimizer {
	t.Helper()
	segs, err := optim.Segments(m.Params, 1e-4)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// rel is the norm-wise relative difference ‖a-b‖/‖b‖.
func rel(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		d += float64(a[i]-b[i]) * float64(a[i]-b[i])
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / max(n, 1e-30))
}

func TestChunks(t *testing.T) {
	for _, c := range []struct {
		n, r int
		want []int
	}{
		{8, 2, []int{4, 4}}, {7, 2, []int{4, 3}}, {5, 4, []int{2, 2, 1}}, {1, 2, []int{1}},
		{3, 3, []int{1, 1, 1}}, {10, 4, []int{3, 3, 3, 1}}, {6, 4, []int{2, 2, 2}}, {0, 2, nil},
	} {
		if got := Chunks(c.n, c.r); !slices.Equal(got, c.want) {
			t.Errorf("Chunks(%d, %d) = %v, want %v (torch.chunk)", c.n, c.r, got, c.want)
		}
	}
}

// DataParallel on R replicas follows one program on the global batch through 5 steps of
// SGD with momentum and weight decay, for even and uneven chunks and for batches smaller
// than R. Tolerance 1e-5 (norm-wise relative, parameters, losses and logits): the two
// compute the same sums in a different association (per-chunk means weighted by n_i/N
// against one mean over N), which differs by float32 rounding, ~1e-7 per step.
func TestEquivalentToOneReplica(t *testing.T) {
	for _, c := range []struct {
		name        string
		replicas, n int
	}{
		{"even 2x4", 2, 8}, {"uneven 4+3", 2, 7}, {"uneven 3+3+1", 3, 7},
		{"small batch 2 on 3 replicas", 3, 2}, {"batch 5 on 4 replicas is 2+2+1", 4, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := newReference(t, convNet(), c.n)
			m := newModel(t, convNet())
			d, err := New(m, classify, WithReplicas(c.replicas), WithGather("logits"))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			opt := sgd(t, m)
			for step := 0; step < 5; step++ {
				b := batch(int64(10+step), c.n)
				wantLoss, wantLogits := ref.step(t, b)
				opt.ZeroGrad()
				res, err := d.Run(context.Background(), b)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Chunks, Chunks(c.n, c.replicas)) {
					t.Fatalf("chunks %v, want %v", res.Chunks, Chunks(c.n, c.replicas))
				}
				if e := math.Abs(float64(res.Loss-wantLoss)) / math.Abs(float64(wantLoss)); e > 1e-5 {
					t.Fatalf("step %d: loss %g, one replica %g (rel %.2g)", step, res.Loss, wantLoss, e)
				}
				if e := rel(res.Outputs["logits"], wantLogits); e > 1e-5 {
					t.Fatalf("step %d: gathered logits rel %.2g from one replica's", step, e)
				}
				if e := rel(m.Params.Grad, ref.m.Params.Grad); e > 1e-5 {
					t.Fatalf("step %d: gradient rel %.2g from one replica's", step, e)
				}
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
			}
			e := rel(m.Params.Data, ref.m.Params.Data)
			t.Logf("parameters after 5 steps: rel %.2g", e)
			if e > 1e-5 {
				t.Fatalf("parameters after 5 steps: rel %.2g from one replica's, want <= 1e-5", e)
			}
			if c.n < c.replicas && len(d.replicas[c.replicas-1].progs) != 0 {
				t.Fatal("an idle replica compiled a program")
			}
		})
	}
}

// BatchNorm follows PyTorch's DataParallel: each replica normalises its chunk with the
// chunk's statistics, and the running statistics are replica 0's: those of the first chunk.
func TestBatchNormRunningStatsFromReplicaZero(t *testing.T) {
	const n = 8
	b := batch(5, n)
	m := newModel(t, bnNet())
	d, err := New(m, classify, WithReplicas(2), WithGather("logits"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Run(context.Background(), b); err != nil {
		t.Fatal(err)
	}

	// Reference: one program on the first chunk only.
	first := newModel(t, bnNet())
	p, err := nn.Compile(first, func(bb *nn.Builder) (*G.Node, error) { return classify(bb, n/2) })
	if err != nil {
		t.Fatal(err)
	}
	_ = p.SetInput("images", b.Inputs["images"][:len(b.Inputs["images"])/2])
	_ = p.SetInput("labels", b.Inputs["labels"][:n/2])
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"1.running_mean", "1.running_var"} {
		got, want := m.Params.Buffer(name).Data, first.Params.Buffer(name).Data
		if e := rel(got, want); e > 1e-6 {
			t.Fatalf("%s = %v, want replica 0's %v", name, got, want)
		}
	}
	if k := m.Params.Buffer("1.num_batches_tracked").Int64[0]; k != 1 {
		t.Fatalf("num_batches_tracked = %d after one step, want 1", k)
	}
	// Replica 1's logits are its own chunk's normalisation, not the global batch's.
	logits, _ := p.Output("logits")
	if e := rel(d.gathered["logits"][:len(logits)], logits); e > 1e-5 {
		t.Fatalf("replica 0's logits rel %.2g from a program on its chunk", e)
	}
}

// A replica that fails is named in the error, the master's gradient is untouched, no
// goroutine is left behind, and the next step works.
func TestReplicaError(t *testing.T) {
	badShape := func(b *nn.Builder, n int) (*G.Node, error) {
		// A user bug: the chunk size is hard-wired to the first replica's.
		return classify(b, 4)
	}
	badLabel := func(b Batch) Batch {
		y := slices.Clone(b.Inputs["labels"])
		y[5] = classes + 2 // in replica 1's chunk (samples 4:7)
		return Batch{N: b.N, Inputs: map[string][]float32{"images": b.Inputs["images"], "labels": y}}
	}
	for _, c := range []struct {
		name  string
		build ChunkFunc
		edit  func(Batch) Batch
		want  string
	}{
		{"bad shape", badShape, func(b Batch) Batch { return b }, `input "images" has shape [4 3 6 6], want a chunk of 3`},
		{"bad label at run time", classify, badLabel, "label"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			m := newModel(t, convNet())
			d, err := New(m, c.build, WithReplicas(2))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_, err = d.Run(context.Background(), c.edit(batch(1, 7)))
			var re *ReplicaError
			if !errors.As(err, &re) || re.Replica != 1 || re.Lo != 4 || re.Hi != 7 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want a ReplicaError of replica 1 (samples 4:7) mentioning %q, got %v", c.want, err)
			}
			t.Log(err)
			for _, g := range m.Params.Grad {
				if g != 0 {
					t.Fatal("a failed step changed the master's gradient")
				}
			}
			waitGoroutines(t, before)
			if c.name == "bad shape" {
				return // the build function is wrong for every step
			}
			// The same DataParallel recovers: its next step matches a fresh one's.
			good := batch(2, 7)
			res, err := d.Run(context.Background(), good)
			if err != nil {
				t.Fatalf("step after a failed step: %v", err)
			}
			fresh, _ := New(newModel(t, convNet()), classify, WithReplicas(2))
			defer fresh.Close()
			want, err := fresh.Run(context.Background(), good)
			if err != nil {
				t.Fatal(err)
			}
			if res.Loss != want.Loss || rel(m.Params.Grad, fresh.model.Params.Grad) != 0 {
				t.Fatalf("after a failure: loss %g, grad differs from a fresh DataParallel's (loss %g)", res.Loss, want.Loss)
			}
		})
	}
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before the step", runtime.NumGoroutine(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCancelledStep(t *testing.T) {
	d, err := New(newModel(t, convNet()), classify, WithReplicas(2))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Run(ctx, batch(1, 4)); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestBadBatchAndDevices(t *testing.T) {
	m := newModel(t, convNet())
	if _, err := New(m, classify, WithDevices(GPUs(0)...)); !errors.Is(err, ErrDeviceUnsupported) {
		t.Fatalf("GPU device: got %v", err)
	}
	d, err := New(m, classify, WithReplicas(2))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := batch(1, 4)
	b.Inputs["labels"] = b.Inputs["labels"][:3]
	if _, err := d.Run(context.Background(), b); err == nil || !strings.Contains(err.Error(), `"labels"`) {
		t.Fatalf("want an error naming input labels, got %v", err)
	}
	b = batch(1, 4)
	b.Inputs["extra"] = make([]float32, 4)
	var re *ReplicaError
	if _, err := d.Run(context.Background(), b); !errors.As(err, &re) || re.Replica != 0 {
		t.Fatalf("want a replica error for an undeclared input, got %v", err)
	}
}

// Evaluation gathers the logits of every chunk in batch order, as one program on the batch.
func TestEval(t *testing.T) {
	const n = 7
	m := newModel(t, convNet())
	d, err := New(m, classify, WithReplicas(3), WithGather("logits"), WithBuildOptions(nn.Training(false)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := batch(4, n)
	res, err := d.Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := nn.Compile(m, func(bb *nn.Builder) (*G.Node, error) { return classify(bb, n) }, nn.Training(false))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range b.Inputs {
		_ = p.SetInput(name, v)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, _ := p.Output("logits")
	if e := rel(res.Outputs["logits"], want); e > 1e-6 {
		t.Fatalf("gathered eval logits rel %.2g from one program's", e)
	}
	if rep := d.Memory(nil); rep.Replicas[0].GradBuffer != 0 {
		t.Fatal("an eval-only replica reports a gradient buffer")
	}
}

// The master holds more than the other replicas: parameters, gradients, optimizer state.
func TestMemoryReport(t *testing.T) {
	m := newModel(t, convNet())
	d, err := New(m, classify, WithReplicas(2), WithGather("logits"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	opt := sgd(t, m)
	if _, err := d.Run(context.Background(), batch(1, 8)); err != nil {
		t.Fatal(err)
	}
	_ = opt.Step()
	rep := d.Memory(opt)
	t.Log("\n" + rep.String())
	psi := 4 * int64(m.Params.NumParams())
	r0, r1 := rep.Replicas[0], rep.Replicas[1]
	if r0.Params != psi || r0.Grad != psi || r0.OptimizerState < psi || r0.Gathered != 4*8*classes {
		t.Fatalf("master: %+v, want params = grad = %d, momentum >= that, gathered %d", r0, psi, 4*8*classes)
	}
	if r1.Graph <= 0 || r1.GradBuffer != psi || r1.Params != 0 {
		t.Fatalf("replica 1: %+v", r1)
	}
	if !(rep.Imbalance() > 1) {
		t.Fatalf("imbalance %g, want > 1", rep.Imbalance())
	}
}

// Cancelling the step stops every replica at its next gradient: each replica's backward
// delivers exactly one gradient after the cancellation.
func TestCancelStopsReplicasAtNextGradient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fired atomic.Int32
	hook := func(*nn.Param) error {
		fired.Add(1)
		cancel()
		return nil
	}
	d, err := New(newModel(t, convNet()), classify, WithReplicas(2), WithBuildOptions(nn.WithGradHook(hook)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Run(ctx, batch(1, 8)); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if n := fired.Load(); n < 1 || n > 2 {
		t.Fatalf("%d gradients delivered after cancelling, want one per running replica (of 6 parameters each)", n)
	}
}
