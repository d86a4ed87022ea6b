package trainer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/tensorboard"
)

// Off a terminal the progress is one line per update, never a redraw; a bar stopped early
// is not drawn as complete.
func TestProgressOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, "", false)
	p.start(0, 3, 10, 0)
	p.update(5, 5, 1.25, 0.1, 100)
	p.update(10, 10, 1.0, 0.1, 100)
	p.finish()
	want := "epoch 1/3  [ 5/10]  step 5  loss 1.2500  lr 0.1  100 img/s\nepoch 1/3  [10/10]  step 10  loss 1.0000  lr 0.1  100 img/s\n"
	if buf.String() != want {
		t.Fatalf("log mode wrote %q, want %q", buf.String(), want)
	}
	buf.Reset()
	p = newProgress(&buf, "bar", false)
	p.start(0, 1, 10, 0)
	p.update(3, 3, 1, 0.1, 100)
	p.finish()
	if s := buf.String(); strings.Contains(s, "10/10") || !strings.Contains(s, "epoch 1/1") {
		t.Fatalf("bar stopped at 3/10 drew %q: want the epoch label and no 10/10", s)
	}
}

// The summary says only what the run did and wrote.
func TestSummaryReportsOnlyWhatHappened(t *testing.T) {
	for _, tc := range []struct {
		name      string
		res       Result
		want, not []string
	}{
		{"stopped before validation", Result{Steps: 3, FinalLoss: 1.5, Checkpoint: "run/ckpt-000000003.npz", MetricsPath: "run/metrics.jsonl"},
			[]string{"no validation", "checkpoint  run/ckpt-000000003.npz", "metrics     run/metrics.jsonl"},
			[]string{"top-1", "plot", "tensorboard", "EMA"}},
		{"validated, with EMA and TensorBoard", Result{Steps: 12, Evaluated: true, Top1: 50, Top5: 90, EMATop1: 40, EMATop5: 80,
			PlotPath: "run/curves.png", TensorBoardPath: "run/events.out.tfevents.1.host"},
			[]string{"val top-1 50.00% top-5 90.00%", "weight average (EMA): val top-1 40.00%", "plot        run/curves.png", "tensorboard run/events"},
			[]string{"no validation", "checkpoint"}},
		{"evaluate only", Result{Evaluated: true, Top1: 10},
			[]string{"val top-1 10.00%"}, []string{"train loss", "all-reduce hidden"}},
		{"resumed at its end", Result{Steps: 4, StartStep: 4, ResumedFrom: "run/ckpt-000000004.npz"},
			[]string{"no step taken: the run was at step 4"}, []string{"train loss", "no validation", "all-reduce hidden"}},
		{"resumed and trained", Result{Steps: 6, StartStep: 4, FinalLoss: 0.5},
			[]string{"final train loss 0.5000", "no validation"}, []string{"no step taken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			writeSummary(&buf, 2, &tc.res)
			for _, w := range tc.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("summary lacks %q:\n%s", w, buf.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(buf.String(), n) {
					t.Errorf("summary has %q:\n%s", n, buf.String())
				}
			}
		})
	}
}

// One run with the recipe flags that change the step (-start-epoch, -grad-accum-steps,
// -mixup/-cutmix, -model-ema, -sync-bn) on 2 ranks, its console captured in a buffer (not a
// terminal): whole lines only, the console's losses are metrics.jsonl's (the mean over
// ranks), the TensorBoard file read back holds the same scalars, and the checkpoint holds
// the weight average.
func TestRunLogTensorBoardAndRecipe(t *testing.T) {
	out := t.TempDir()
	cfg := smallConfig(t, out)
	cfg.Quiet, cfg.TensorBoard, cfg.Resume = false, true, "none"
	cfg.StartEpoch, cfg.GradAccum = 1, 2 // 12 batches a rank: 6 steps an epoch; the run does epoch 2's
	cfg.Mix = Mixup{Mixup: 0.2, Cutmix: 1, Prob: 1, SwitchProb: 0.5}
	cfg.ModelEMA, cfg.EMADecay, cfg.SyncBN = true, 0.9, true
	var console bytes.Buffer
	res := runWorldTo(t, 2, cfg, &console)
	r := res[0]
	log := console.String()
	t.Logf("console:\n%s", log)
	if strings.Contains(log, "\r") {
		t.Fatalf("console output has carriage returns: %q", log)
	}
	if r.Steps != 12 || !r.Evaluated || r.EMATop5 <= 0 {
		t.Fatalf("steps %d evaluated %v EMA top-5 %v: want 12 steps (epoch 2 of 6 steps), a validation of both models", r.Steps, r.Evaluated, r.EMATop5)
	}
	// Console lines against metrics.jsonl's records.
	recs := readRecords(t, r.MetricsPath)
	line := regexp.MustCompile(`(?m)^epoch 2/2  \[(\d)/6\]  step (\d+)  loss (\S+)  lr (\S+)  \d+ img/s$`)
	ms := line.FindAllStringSubmatch(log, -1)
	var train []Record
	for _, rec := range recs {
		if rec.Kind == "train" {
			train = append(train, rec)
		}
	}
	if len(ms) != 3 || len(train) != 3 {
		t.Fatalf("%d progress lines and %d train records, want 3 each (steps 8, 10, 12)", len(ms), len(train))
	}
	for i, m := range ms {
		if m[2] != fmt.Sprint(train[i].Step) || m[3] != fmt.Sprintf("%.4f", train[i].Loss) {
			t.Errorf("console step %s loss %s, metrics.jsonl step %d loss %.4f", m[2], m[3], train[i].Step, train[i].Loss)
		}
	}
	if !strings.Contains(log, "starting at epoch 1 (step 6") || !strings.Contains(log, "x 2 accumulated") {
		t.Errorf("console does not say where the run started or that it accumulates")
	}
	// TensorBoard: the same scalars, read back by the package's own decoder.
	events, err := tensorboard.ReadFile(r.TensorBoardPath)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[int64]float32{}
	for _, e := range events {
		for _, v := range e.Values {
			if got[v.Tag] == nil {
				got[v.Tag] = map[int64]float32{}
			}
			got[v.Tag][e.Step] = v.Value
		}
	}
	for _, rec := range recs {
		check := func(tag string, v float64) {
			if g, ok := got[tag][rec.Step]; !ok || g != float32(v) {
				t.Errorf("tensorboard %s at step %d = %v (present %v), metrics.jsonl %v", tag, rec.Step, g, ok, v)
			}
		}
		switch rec.Kind {
		case "train":
			check("train/loss", rec.Loss)
			check("train/lr", rec.LR)
			check("train/img_per_s", rec.ImgsPerS)
		case "val":
			check("val/top1", rec.Top1)
			check("val/loss", rec.Loss)
		case "val_ema":
			check("val_ema/top1", rec.Top1)
		}
	}
	if _, ok := got["train/overlap"][12]; !ok {
		t.Errorf("no train/overlap scalar at the last step: tags %v", keys(got))
	}
	// The checkpoint holds the weight average.
	entries, err := checkpoint.Load(r.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		found = found || e.Name == "train.ema.params" && len(e.F32) > 0
	}
	if !found {
		t.Errorf("checkpoint %s has no train.ema.params", r.Checkpoint)
	}
}

// -max-steps stops inside an epoch: the run ends with a checkpoint of its last step, writes
// the plot of what it logged, and its summary reports no validation and only files that
// exist.
func TestMaxStepsEndsWithCheckpoint(t *testing.T) {
	out := t.TempDir()
	cfg := smallConfig(t, out)
	cfg.Quiet, cfg.MaxSteps, cfg.PrintFreq, cfg.Resume = false, 3, 1, "none"
	var console bytes.Buffer
	r := runWorldTo(t, 1, cfg, &console)[0]
	log := console.String()
	t.Logf("console:\n%s", log)
	if filepath.Base(r.Checkpoint) != "ckpt-000000003.npz" || r.Evaluated {
		t.Fatalf("checkpoint %q evaluated %v: want ckpt-000000003.npz and no validation", r.Checkpoint, r.Evaluated)
	}
	if strings.Contains(log, "top-1") || !strings.Contains(log, "no validation") {
		t.Errorf("summary reports an accuracy")
	}
	paths := regexp.MustCompile(`(?m)^\s+(?:checkpoint|metrics|plot|tensorboard)\s+(\S+)$`).FindAllStringSubmatch(log, -1)
	if len(paths) != 3 {
		t.Errorf("summary lists %d files, want checkpoint, metrics and plot", len(paths))
	}
	for _, m := range paths {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("summary names %s: %v", m[1], err)
		}
	}
}

// runWorldTo is runWorld with rank 0's console going to out (the other ranks print nothing).
func runWorldTo(t *testing.T, world int, cfg runConfig, out io.Writer) []*Result {
	t.Helper()
	res, errs := runConfigs(world, cfg, out)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}

func keys(m map[string]map[int64]float32) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
