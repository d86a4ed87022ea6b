package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Every option refuses what PyTorch's and timm's counterparts refuse, naming itself.
func TestOptionsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithEpochs(0), "WithEpochs(0)"},
		{WithBatchSize(-1), "WithBatchSize(-1)"},
		{WithGradAccum(0), "WithGradAccum(0)"},
		{WithMaxSteps(-2), "WithMaxSteps(-2)"},
		{WithWeightDecay(-1e-4), "WithWeightDecay(-0.0001)"},
		{WithWeightDecay(math.NaN()), "WithWeightDecay(NaN)"},
		{WithOptimizer(SGD(-1, 0.9)), "sgd learning rate -1"},
		{WithOptimizer(AdamW(math.Inf(1))), "adamw learning rate +Inf"},
		{WithOptimizer(Optimizer{}), "the zero Optimizer"},
		{WithOptimizer(Solver(G.NewBarzilaiBorweinSolver())), "Solver (a gorgonia solver)"},
		{WithClipGrad(math.Inf(1)), "WithClipGrad(+Inf)"},
		{WithLabelSmoothing(1), "WithLabelSmoothing(1)"},
		{WithAutocast("fp8", 0), `WithAutocast("fp8")`},
		{WithEMA(1), "WithEMA(1)"},
		{WithStrategy("fsdp"), `unknown strategy "fsdp"`},
		{WithDevice("tpu"), `unknown device "tpu"`},
		{WithOffload("nvme"), `unknown offload "nvme"`},
		{WithCheckpoints(1, 0), "WithCheckpoints(1, 0)"},
		{WithResume(""), `WithResume("")`},
		{WithProgress("fancy", 10), `WithProgress("fancy")`},
		{WithProgress("bar", 0), "printFreq >= 1"},
		{WithSchedule(Schedule{Name: "exp"}), `unknown schedule "exp"`},
		{WithSchedule(Schedule{Name: "onecycle", WarmupEpochs: 1}), "onecycle has its own rise"},
		{WithSchedule(Schedule{Name: "cosine", MinLR: 1}), "MinLR 1 is above the learning rate 0.1"},
		{WithMixup(Mixup{Mixup: -1}), "alphas -1"},
		{WithTimeout(-1), "WithTimeout(-1ns)"},
		{WithClasses(-3), "WithClasses(-3)"},
		{WithTimelines(-1), "WithTimelines(-1)"},
		{WithCommHook(CommHookConfig{Name: "int8"}), `unknown -ddp-comm-hook "int8"`},
	} {
		_, err := New(tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%s): %v, want an error saying %q", tc.want, err, tc.want)
		}
	}
	if _, err := New(WithOptimizer(Solver(G.NewAdamSolver())), WithStrategy("zero3")); err == nil || !strings.Contains(err.Error(), "needs strategy ddp or none") {
		t.Errorf("a gorgonia solver under zero3: %v", err)
	}
	if _, err := New(WithEMA(0.99), WithStrategy("zero3")); err == nil || !strings.Contains(err.Error(), "replicated strategy") {
		t.Errorf("WithEMA under zero3: %v", err)
	}
}

// blobs is a data set of 1x8x8 images of 3 classes: noise plus a bright row band whose
// position is the class.
type blobs struct{ n int }

func (b blobs) Len() int             { return b.n }
func (b blobs) Shape() (c, h, w int) { return 1, 8, 8 }
func (b blobs) Load(_ context.Context, i int, _ *rand.Rand, dst []float32) (int64, error) {
	rng := rand.New(rand.NewPCG(uint64(i), 3))
	label := int64(i % 3)
	for p := range 64 {
		dst[p] = float32(rng.NormFloat64()) / 4
		if int64(p/8*3/8) == label {
			dst[p]++
		}
	}
	return label, nil
}

// dense is a plain gorgonia model: images [n,1,8,8] reshaped to [n,64], times a learnable
// [64,3].
func dense(b *nn.Builder, x *G.Node) (*G.Node, error) {
	w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(64, 3), G.WithName("w"), G.WithInit(G.Zeroes()))
	lw, err := b.Learnable(w)
	if err != nil {
		return nil, err
	}
	h, err := G.Reshape(x, tensor.Shape{x.Shape()[0], 64})
	if err != nil {
		return nil, err
	}
	return G.Mul(h, lw)
}

// fitWorld runs a Fit on world goroutine ranks over in-process groups, with opts' options
// (called once per rank: a gorgonia solver is one rank's).
func fitWorld(t *testing.T, world int, m Model, src Source, opts func() []Option) []*Result {
	t.Helper()
	res, errs := eachRank(world, func(_ int, g comm.Group) (*Result, error) {
		tr, err := New(append(opts(), WithGroup(g))...)
		if err != nil {
			return nil, err
		}
		return tr.Fit(context.Background(), m, src)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}

// A plain gorgonia model on map-style data sets under DDP at world size 2 learns its task,
// the callbacks run at their points in order on every rank, and a second Fit with more
// epochs resumes from the first one's last checkpoint.
func TestFitGraphModelOnDatasetsWithCallbacks(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	events, ends := map[int][]string{}, 0
	note := func(rank int, e string) {
		mu.Lock()
		defer mu.Unlock()
		events[rank] = append(events[rank], e)
	}
	cb := Callback{
		OnTrainStart: func(_ context.Context, s Step) error { note(s.Rank, fmt.Sprintf("start@%d", s.Step)); return nil },
		BeforeUpdate: func(_ context.Context, s Step) error { note(s.Rank, fmt.Sprintf("update%d", s.Step)); return nil },
		OnStepEnd:    func(_ context.Context, s Step) error { note(s.Rank, fmt.Sprintf("step%d", s.Step)); return nil },
		OnEpochEnd: func(_ context.Context, e Epoch) error {
			note(e.Rank, fmt.Sprintf("epoch%d val=%v ckpt=%s", e.Epoch, e.Evaluated, filepath.Base(e.Checkpoint)))
			return nil
		},
		OnTrainEnd: func(context.Context, *Result) error {
			mu.Lock()
			defer mu.Unlock()
			ends++
			return nil
		},
	}
	src := DatasetSource{Train: blobs{24}, Val: blobs{12}, Classes: 3, Workers: 1}
	opts := []Option{WithBatchSize(8), WithDir(dir), WithOptimizer(SGD(0.5, 0.9)), WithOutput(io.Discard),
		WithTimelines(0), WithCallback(cb)}
	res := fitWorld(t, 2, Graph(dense).Named("dense"), src, func() []Option { return append(opts, WithEpochs(2)) })
	// 24 images over 2 ranks in batches of 4: 3 steps an epoch.
	want := "start@0 update1 step1 update2 step2 update3 step3 epoch0 val=true ckpt=ckpt-000000003.npz update4 step4 update5 step5 update6 step6 epoch1 val=true ckpt=ckpt-000000006.npz"
	for rank := range 2 {
		if got := strings.Join(events[rank], " "); got != want {
			t.Errorf("rank %d's callbacks:\n%s\nwant\n%s", rank, got, want)
		}
	}
	if ends != 2 {
		t.Errorf("OnTrainEnd ran %d times over 2 ranks", ends)
	}
	if r := res[0]; r.Steps != 6 || !r.Evaluated || r.Top1 < 90 {
		t.Errorf("after 2 epochs: %d steps, evaluated %v, top-1 %.1f%% (want 6, true, >= 90%%)", r.Steps, r.Evaluated, r.Top1)
	}
	res = fitWorld(t, 2, Graph(dense).Named("dense"), src, func() []Option { return append(opts[:len(opts)-1:len(opts)-1], WithEpochs(3)) })
	if r := res[0]; filepath.Base(r.ResumedFrom) != "ckpt-000000006.npz" || r.StartStep != 6 || r.Steps != 9 {
		t.Errorf("the second Fit: resumed from %q at step %d, ended at %d; want ckpt-000000006.npz, 6, 9", r.ResumedFrom, r.StartStep, r.Steps)
	}
}

// A run without a validation split checkpoints each epoch and says it did not validate;
// Validate refuses such a source.
func TestFitWithoutValidation(t *testing.T) {
	dir := t.TempDir()
	src := DatasetSource{Train: blobs{12}, Classes: 3, Workers: 1}
	res := fitWorld(t, 1, Graph(dense), src, func() []Option {
		return []Option{WithBatchSize(4), WithDir(dir), WithOutput(io.Discard), WithTimelines(0)}
	})
	if r := res[0]; r.Evaluated || r.Steps != 3 || filepath.Base(r.Checkpoint) != "ckpt-000000003.npz" {
		t.Errorf("evaluated %v, %d steps, checkpoint %q; want false, 3, ckpt-000000003.npz", r.Evaluated, r.Steps, r.Checkpoint)
	}
	tr, err := New(WithBatchSize(4), WithDir(dir), WithOutput(io.Discard), WithGroup(comm.NewLocalGroups(1)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Validate(context.Background(), Graph(dense), src); err == nil || !strings.Contains(err.Error(), "no validation split") {
		t.Errorf("Validate without a validation split: %v", err)
	}
}

// What the model and the data cannot do together ends Fit before training, saying what.
func TestFitRefusesMismatches(t *testing.T) {
	wrongClasses := func(b *nn.Builder, x *G.Node) (*G.Node, error) {
		w := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(64, 5), G.WithName("w"), G.WithInit(G.Zeroes()))
		lw, err := b.Learnable(w)
		if err != nil {
			return nil, err
		}
		h, err := G.Reshape(x, tensor.Shape{x.Shape()[0], 64})
		if err != nil {
			return nil, err
		}
		return G.Mul(h, lw)
	}
	bad := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		m    Model
		src  Source
		want string
	}{
		{"no model", Model{}, DatasetSource{Train: blobs{8}, Classes: 3}, "no model"},
		{"unknown arch", Arch("resnet19"), DatasetSource{Train: blobs{8}, Classes: 3}, `Arch("resnet19")`},
		{"logits", Graph(wrongClasses), DatasetSource{Train: blobs{8}, Classes: 3}, "logits are (1, 5) for images (1, 1, 8, 8); want (1, 3)"},
		{"no classes", Graph(dense), DatasetSource{Train: blobs{8}}, "number of classes is unknown"},
		{"no source", Graph(dense), nil, "no data"},
		{"batch error", Graph(dense), BatchSource{Steps: 2, Shape: [3]int{1, 8, 8}, Classes: 3,
			Train: func(context.Context, BatchAt, *data.Batch) error { return bad }}, "batch 0 of epoch 0: disk on fire"},
		{"short batch", Graph(dense), BatchSource{Steps: 2, Shape: [3]int{1, 8, 8}, Classes: 3,
			Train: func(_ context.Context, at BatchAt, b *data.Batch) error {
				*b = data.Batch{N: at.N, C: 1, H: 8, W: 8}
				return nil
			}},
			"holds 0 values and 0 labels for 4 images"},
	} {
		tr, err := New(WithBatchSize(4), WithDir(t.TempDir()), WithOutput(io.Discard), WithGroup(comm.NewLocalGroups(1)[0]))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Fit(context.Background(), tc.m, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// Under every strategy, a Fit stopped mid-epoch (WithMaxSteps) and resumed by a second Fit
// ends with the checkpoint of an uninterrupted Fit, bit for bit: a plain gorgonia model and
// gorgonia's Adam under ddp and none, a module with SGD and AdamW under zero3 and dp.
func TestFitResumesBitIdenticalEveryStrategy(t *testing.T) {
	module := func() Model {
		return ModuleFor(func(classes int) (nn.Module, error) {
			return nn.Seq(&nn.Flatten{}, &nn.Linear{In: 64, Out: 16}, &nn.ReLU{}, &nn.Linear{In: 16, Out: classes}), nil
		})
	}
	for _, tc := range []struct {
		strategy string
		world    int
		model    func() Model
		opt      func() Optimizer
	}{
		{"ddp", 2, func() Model { return Graph(dense) }, func() Optimizer { return Solver(G.NewAdamSolver(G.WithLearnRate(0.01))) }},
		{"none", 1, func() Model { return Graph(dense) }, func() Optimizer { return Solver(G.NewAdamSolver(G.WithLearnRate(0.01))) }},
		{"zero3", 2, module, func() Optimizer { return AdamW(0.01) }},
		{"dp", 1, module, func() Optimizer { return SGD(0.1, 0.9) }},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			src := DatasetSource{Train: blobs{24}, Val: blobs{6}, Classes: 3, Workers: 1}
			// 24 images in global batches of 4: 6 steps an epoch, 12 in two.
			opts := func(dir string, o ...Option) func() []Option {
				return func() []Option {
					return append([]Option{WithStrategy(tc.strategy), WithEpochs(2), WithBatchSize(4), WithDir(dir), WithSeed(7),
						WithOptimizer(tc.opt()), WithSchedule(Schedule{Name: "cosine", WarmupEpochs: 1}), WithClipGrad(1),
						WithOutput(io.Discard), WithTimelines(0), WithTensorBoard(false)}, o...)
				}
			}
			whole, split := t.TempDir(), t.TempDir()
			fitWorld(t, tc.world, tc.model(), src, opts(whole))
			fitWorld(t, tc.world, tc.model(), src, opts(split, WithMaxSteps(4)))
			res := fitWorld(t, tc.world, tc.model(), src, opts(split))
			if res[0].StartStep != 4 || res[0].Steps != 12 {
				t.Fatalf("the resumed Fit ran steps %d to %d, want 4 to 12", res[0].StartStep, res[0].Steps)
			}
			n, diff := compareFinalCheckpoints(t, tc.strategy, whole, split, 12)
			if diff != "" {
				t.Fatalf("after %d equal entries: %s", n, diff)
			}
			t.Logf("%d checkpoint entries bitwise equal", n)
		})
	}
}
