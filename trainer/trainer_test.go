package trainer

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/data/synth"
	_ "github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// splitData writes a generated 4-class ImageFolder (train: trainPer images a class, val:
// valPer) once per test binary and shape, under one temporary folder that TestMain removes
// (removeTestData).
var (
	dataMu   sync.Mutex
	dataRoot string
	dataDirs = map[[2]int]string{}
)

func splitData(t *testing.T, trainPer, valPer int) string {
	t.Helper()
	dataMu.Lock()
	defer dataMu.Unlock()
	shape := [2]int{trainPer, valPer}
	if dir, ok := dataDirs[shape]; ok {
		return dir
	}
	if dataRoot == "" {
		root, err := os.MkdirTemp("", "gp-trainer-test")
		if err != nil {
			t.Fatal(err)
		}
		dataRoot = root
	}
	dir := filepath.Join(dataRoot, fmt.Sprintf("synth-%d-%d", trainPer, valPer))
	if err := synth.WriteSplit(dir, 4, trainPer, valPer, 20, 3); err != nil {
		t.Fatal(err)
	}
	dataDirs[shape] = dir
	return dir
}

// tinyData is the tests' usual ImageFolder: 96 training and 32 validation images.
func tinyData(t *testing.T) string {
	t.Helper()
	return splitData(t, 24, 8)
}

// removeTestData deletes what splitData wrote.
func removeTestData() {
	if dataRoot != "" {
		os.RemoveAll(dataRoot)
	}
}

// tinyConfig is a run of resnet18 on tinyData's 16x16 images with the ResNet recipe
// (SGD, weight decay 1e-4, step decay), on 2 loader workers, quiet.
func tinyConfig(t *testing.T, out string) runConfig {
	return runConfig{
		Data: tinyData(t), Arch: "resnet18", ImageSize: 16,
		Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9, WeightDecay: 1e-4, Workers: 2,
		Optimizer: "sgd", Sched: "step", Resume: "auto", PrintFreq: 2, Seed: 5,
		Out: out, Keep: 2, Quiet: true,
	}
}

// smallConfig is tinyConfig with resnet8 (the CIFAR ResNet: 78k parameters, where
// resnet18 has 11.2M), for tests whose property holds for any model with BatchNorm trained
// by a stateful optimizer: resuming, restarts, strategies. On 16x16 images resnet18's step
// costs mostly what grows with its parameters (the optimizer's update, the all-reduce,
// building and checkpointing 11M values), which such a test does not need.
func smallConfig(t *testing.T, out string) runConfig {
	c := tinyConfig(t, out)
	c.Arch = "resnet8"
	return c
}

// runWorld runs the trainer on world goroutine ranks over in-process groups.
func runWorld(t *testing.T, world int, cfg runConfig) []*Result {
	t.Helper()
	return runWorldTo(t, world, cfg, os.Stdout)
}

// eachRank runs fn for world goroutine ranks over in-process groups and returns each rank's
// result and error.
func eachRank(world int, fn func(r int, g comm.Group) (*Result, error)) ([]*Result, []error) {
	groups := comm.NewLocalGroups(world)
	res, errs := make([]*Result, world), make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = fn(r, groups[r])
		}()
	}
	wg.Wait()
	return res, errs
}

// runConfigs runs the trainer with cfg on world ranks, rank 0 writing to out.
func runConfigs(world int, cfg runConfig, out io.Writer) ([]*Result, []error) {
	return eachRank(world, func(r int, g comm.Group) (*Result, error) {
		c := cfg
		c.Group = g
		w := io.Discard
		if r == 0 {
			w = out
		}
		return fitRun(context.Background(), c, w)
	})
}

func TestDDPWorld2TrainsAndWritesArtifacts(t *testing.T) {
	out := t.TempDir()
	cfg := smallConfig(t, out)
	cfg.Epochs = 1
	res := runWorld(t, 2, cfg)
	r := res[0]
	// 96 training images over 2 ranks is 48 per rank, in batches of 4: 12 steps.
	if r.Steps != 12 {
		t.Fatalf("steps = %d, want 12", r.Steps)
	}
	for _, l := range r.LossHistory {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("loss %v", r.LossHistory)
		}
	}
	if len(r.TimelinePaths) != 3 || !strings.HasSuffix(r.TimelinePaths[2], "timeline.json") {
		t.Fatalf("timelines %v: want one per rank and the merged one", r.TimelinePaths)
	}
	for _, p := range []string{r.Checkpoint, r.MetricsPath, r.PlotPath, r.TimelinePaths[0], r.TimelinePaths[1], r.TimelinePaths[2]} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Fatalf("artifact %q missing or empty: %v", p, err)
		}
	}
	if r.Top1 <= 0 || r.Top5 < r.Top1 {
		t.Fatalf("top-1 %.1f top-5 %.1f", r.Top1, r.Top5)
	}
}

// A run stopped after a checkpoint and resumed continues the exact loss trajectory of an
// uninterrupted run with the same seed.
func TestResumeContinuesTrajectory(t *testing.T) {
	full := smallConfig(t, t.TempDir())
	full.Resume = "none"
	want := runWorld(t, 2, full)[0].LossHistory

	out := t.TempDir()
	first := smallConfig(t, out)
	first.MaxSteps, first.CkptEvery = 17, 17 // stop inside the second epoch, right after a checkpoint
	got := runWorld(t, 2, first)[0].LossHistory
	second := smallConfig(t, out)
	r := runWorld(t, 2, second)[0]
	if !strings.Contains(r.ResumedFrom, "ckpt-000000017") {
		t.Fatalf("resumed from %q, want the step-17 checkpoint", r.ResumedFrom)
	}
	got = append(got, r.LossHistory...)
	if len(got) != len(want) {
		t.Fatalf("%d steps after resume, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %.9g after resume, want %.9g (uninterrupted)", i+1, got[i], want[i])
		}
	}
}

func TestCorruptCheckpointFallsBack(t *testing.T) {
	out := t.TempDir()
	cfg := smallConfig(t, out)
	cfg.Epochs, cfg.CkptEvery, cfg.Keep = 1, 4, 5
	runWorld(t, 1, cfg)
	ck := &checkpoints{dir: out}
	all, err := ck.list()
	if err != nil || len(all) < 2 {
		t.Fatalf("checkpoints %v, %v", all, err)
	}
	if err := os.WriteFile(all[0], []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Epochs = 2
	r := runWorld(t, 1, cfg)[0]
	if r.ResumedFrom != all[1] {
		t.Fatalf("resumed from %q, want the previous checkpoint %q", r.ResumedFrom, all[1])
	}
}

// DataParallel in one process: with one replica it is exactly the single-process run; with
// two it trains (the dp package's own tests check its equivalence on a model without
// BatchNorm; with BatchNorm each replica normalises its own chunk, as in PyTorch).
func TestDataParallelStrategy(t *testing.T) {
	base := smallConfig(t, t.TempDir())
	base.Epochs, base.MaxSteps = 1, 4
	want := runWorld(t, 1, base)[0].LossHistory
	one := smallConfig(t, t.TempDir())
	one.Epochs, one.MaxSteps, one.Strategy, one.DPReplicas = 1, 4, "dp", 1
	got := runWorld(t, 1, one)[0].LossHistory
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: DataParallel(1) loss %.9g, single process %.9g", i, got[i], want[i])
		}
	}
	two := smallConfig(t, t.TempDir())
	two.Epochs, two.MaxSteps, two.Strategy, two.DPReplicas = 1, 4, "dp", 2
	for _, l := range runWorld(t, 1, two)[0].LossHistory {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("DataParallel(2) loss %v", l)
		}
	}
}

// Every strategy trains a few steps at world 2 (DataParallel: 2 replicas in one process),
// with and without autocast, and ZeRO-3 with each offload.
func TestStrategiesWorld2(t *testing.T) {
	if testing.Short() {
		t.Skip("trains")
	}
	tests := []struct{ strategy, amp, offload, opt string }{
		{"ddp", "", "", ""}, {"ddp", "bf16", "", ""}, {"ddp", "fp16", "", ""},
		{"dp", "", "", ""}, {"dp", "bf16", "", ""},
		{"zero3", "", "", ""}, {"zero3", "bf16", "", ""}, {"zero3", "fp16", "", ""},
		{"zero3", "", "cpu", "adamw"}, {"zero3", "", "disk", "adamw"},
	}
	for _, tc := range tests {
		name := strings.Trim(strings.Join([]string{tc.strategy, tc.amp, tc.offload}, "-"), "-")
		t.Run(name, func(t *testing.T) {
			cfg := smallConfig(t, t.TempDir())
			cfg.Epochs, cfg.MaxSteps, cfg.Strategy, cfg.AMP, cfg.Offload, cfg.Optimizer = 1, 3, tc.strategy, tc.amp, tc.offload, tc.opt
			if tc.opt == "adamw" {
				cfg.LR = 1e-3
			}
			world := 2
			if tc.strategy == "dp" {
				world, cfg.DPReplicas = 1, 2
			}
			r := runWorld(t, world, cfg)[0]
			if tc.strategy == "zero3" && len(r.TimelinePaths) != 3 {
				t.Fatalf("timelines %v: want one per rank and the merged one", r.TimelinePaths)
			}
			if len(r.LossHistory) != 3 {
				t.Fatalf("%d steps, want 3", len(r.LossHistory))
			}
			for _, l := range r.LossHistory {
				if math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 || l > 20 {
					t.Fatalf("losses %v", r.LossHistory)
				}
			}
		})
	}
}

// A ZeRO-3 run stopped after a sharded checkpoint resumes with the same trajectory.
func TestZeroResumeContinuesTrajectory(t *testing.T) {
	full := smallConfig(t, t.TempDir())
	full.Strategy, full.Resume, full.Epochs = "zero3", "none", 1
	want := runWorld(t, 2, full)[0].LossHistory

	out := t.TempDir()
	first := smallConfig(t, out)
	first.Strategy, first.Epochs, first.MaxSteps, first.CkptEvery = "zero3", 1, 5, 5
	got := runWorld(t, 2, first)[0].LossHistory
	second := smallConfig(t, out)
	second.Strategy, second.Epochs = "zero3", 1
	r := runWorld(t, 2, second)[0]
	if !strings.Contains(r.ResumedFrom, "step-000000005") {
		t.Fatalf("resumed from %q, want the step-5 checkpoint", r.ResumedFrom)
	}
	got = append(got, r.LossHistory...)
	if len(got) != len(want) {
		t.Fatalf("%d steps, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %.9g after resume, want %.9g", i+1, got[i], want[i])
		}
	}
}
