package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// A 2-process job under gprun --max-restarts whose rank is SIGKILLed in the middle of a
// step chosen at random (not right after a checkpoint) resumes from the last checkpoint,
// redoes the steps after it and ends with exactly the state of an uninterrupted run: every
// entry of the final checkpoint (parameters, buffers, optimizer and scheduler state, step,
// RNG) bitwise equal, for DDP and ZeRO-3. Its metrics log holds each step once, with the
// uninterrupted run's per-step losses.
//
// The step and rank come from a seed that the test logs; GP_TEST_KILL_SEED=N replays one.
func TestSIGKILLMidEpochResumesBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("launches processes")
	}
	gprun := buildGprun(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GP_TEST_KILL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("GP_TEST_KILL_SEED=%q: %v", s, err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("kill seed %d (GP_TEST_KILL_SEED=%d replays it)", seed, seed)

	// DDP with its fused step (RunStep: the per-bucket update during backward); ZeRO-3 with
	// gradient clipping, so its step is Run, the norm all-reduced over the shards, then Step.
	for _, tc := range []struct {
		strategy string
		clip     float64
	}{{"ddp", 0}, {"zero3", 1}} {
		strategy := tc.strategy
		t.Run(strategy, func(t *testing.T) {
			base := smallConfig(t, "")
			base.ClipGrad = tc.clip
			// 96 images, batch 8 over 2 ranks: 12 steps an epoch; 16 steps in all (an epoch
			// and a third), checkpoints every 5 steps, at the epoch's end and at the last step.
			const steps, perEpoch = 16, 12
			base.Strategy, base.PrintFreq, base.CkptEvery, base.Keep, base.MaxSteps = strategy, 1, 5, 2, steps
			// A step after the first checkpoint; the kill lands before that step's own
			// checkpoint, so the run resumes from an earlier one and redoes the steps since.
			killStep := int64(6 + rng.IntN(steps-5))
			killRank := rng.IntN(2)
			var resumeAt int64
			for s := int64(1); s < killStep; s++ {
				if s%int64(base.CkptEvery) == 0 || s%perEpoch == 0 {
					resumeAt = s
				}
			}
			t.Logf("%s: SIGKILL rank %d during step %d; expecting a resume from step %d", strategy, killRank, killStep, resumeAt)

			whole := base
			whole.Out = t.TempDir()
			start := time.Now()
			runUnderGprun(t, gprun, whole, 0)
			tWhole := time.Since(start)

			killed := base
			killed.Out = t.TempDir()
			killed.Faults = Faults{KillAtStep: killStep, KillRank: killRank}
			start = time.Now()
			out := runUnderGprun(t, gprun, killed, 1)
			tKilled := time.Since(start)
			if !strings.Contains(out, fmt.Sprintf("rank %d: SIGKILL during step %d", killRank, killStep)) {
				t.Fatalf("rank %d was not killed during step %d:\n%s", killRank, killStep, out)
			}
			if want := fmt.Sprintf("at step %d ", resumeAt); !regexp.MustCompile(`resumed from \S+ ` + want).MatchString(out) {
				t.Fatalf("no %q in the restarted job's output:\n%s", "resumed from ... "+want, out)
			}

			n, diff := compareFinalCheckpoints(t, strategy, whole.Out, killed.Out, steps)
			if diff != "" {
				t.Errorf("killed rank %d during step %d, resumed from step %d: %s", killRank, killStep, resumeAt, diff)
			}
			wantLog, gotLog := metricsByStep(t, whole.Out), metricsByStep(t, killed.Out)
			if len(gotLog) != steps {
				t.Fatalf("metrics log of the restarted job: %d train steps, want %d", len(gotLog), steps)
			}
			for i := range wantLog {
				if math.Float64bits(gotLog[i]) != math.Float64bits(wantLog[i]) {
					t.Fatalf("step %d: loss %v after the SIGKILL and restart, %v uninterrupted", i+1, gotLog[i], wantLog[i])
				}
			}
			if diff != "" {
				return
			}
			t.Logf("%s: killed rank %d during step %d, resumed from step %d: %d checkpoint tensors bitwise equal; uninterrupted run %.1fs, killed and restarted %.1fs",
				strategy, killRank, killStep, resumeAt, n, tWhole.Seconds(), tKilled.Seconds())
		})
	}
}

// buildGprun builds cmd/gprun into the test's temporary directory.
func buildGprun(t *testing.T) string {
	t.Helper()
	// go test puts its own toolchain's bin first on the test's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build gprun")
	}
	bin := filepath.Join(t.TempDir(), "gprun")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/gorgonia-parallel/gp/cmd/gprun").CombinedOutput(); err != nil {
		t.Fatalf("building gprun: %v\n%s", err, out)
	}
	return bin
}

// runUnderGprun runs cfg as a 2-process job of this test binary under gprun with
// --max-restarts restarts, restarting at once (--restart-backoff 0: the wait is
// parallel/launch's to test, not the resume's), and returns the job's output. The job is killed (gprun with
// SIGKILL, its workers through their parent-death signal) if it runs past 3 minutes.
func runUnderGprun(t *testing.T, gprun string, cfg runConfig, restarts int) string {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gprun, "--nproc-per-node", "2", "--max-restarts", strconv.Itoa(restarts),
		"--restart-backoff", "0", "--", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GP_TRAINER_TEST_WORKER="+string(js), "OPENBLAS_NUM_THREADS=1")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("gprun: %v\n%s", err, out.String())
	}
	return out.String()
}

// metricsByStep reads a run's metrics log, failing on a train step logged twice or
// missing, and returns the per-step losses.
func metricsByStep(t *testing.T, dir string) []float64 {
	t.Helper()
	var out []float64
	for _, r := range readRecords(t, filepath.Join(dir, "metrics.jsonl")) {
		if r.Kind != "train" {
			continue
		}
		if r.Step != int64(len(out))+1 {
			t.Fatalf("%s: train record of step %d after step %d: each step must be logged once, in order", dir, r.Step, len(out))
		}
		out = append(out, r.StepLoss)
	}
	return out
}

// compareFinalCheckpoints compares, entry by entry and bit for bit, every file of the
// final checkpoint (step) of two runs: DDP's ckpt-N.npz, or ZeRO-3's shards and trainer
// state. It returns the number of entries compared and, when one differs, the first.
func compareFinalCheckpoints(t *testing.T, strategy, wantDir, gotDir string, step int64) (int, string) {
	t.Helper()
	pattern := fmt.Sprintf("ckpt-%09d.npz", step)
	if strategy == "zero3" {
		pattern = filepath.Join("zero", fmt.Sprintf("step-%09d", step), "*.npz")
	}
	files, err := filepath.Glob(filepath.Join(wantDir, pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no final checkpoint %s in %s (%v)", pattern, wantDir, err)
	}
	n := 0
	for _, wf := range files {
		rel, _ := filepath.Rel(wantDir, wf)
		want, err := checkpoint.Load(wf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkpoint.Load(filepath.Join(gotDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			return n, fmt.Sprintf("%s: %d entries after the restart, %d uninterrupted", rel, len(got), len(want))
		}
		for i := range want {
			if msg := entryDiff(want[i], got[i]); msg != "" {
				return n, fmt.Sprintf("%s: first differing tensor: %s", rel, msg)
			}
			n++
		}
	}
	return n, ""
}

// entryDiff describes how got differs from want ("" when they are bitwise equal).
func entryDiff(want, got nn.StateEntry) string {
	if want.Name != got.Name || !slices.Equal(want.Shape, got.Shape) {
		return fmt.Sprintf("%s %v, want %s %v", got.Name, got.Shape, want.Name, want.Shape)
	}
	if len(want.F32) != len(got.F32) || len(want.F64) != len(got.F64) || len(want.I64) != len(got.I64) {
		return fmt.Sprintf("%s: dtype or length differs", want.Name)
	}
	for i := range want.F32 {
		if math.Float32bits(want.F32[i]) != math.Float32bits(got.F32[i]) {
			return fmt.Sprintf("%s[%d] = %v, uninterrupted %v", want.Name, i, got.F32[i], want.F32[i])
		}
	}
	for i := range want.F64 {
		if math.Float64bits(want.F64[i]) != math.Float64bits(got.F64[i]) {
			return fmt.Sprintf("%s[%d] = %v, uninterrupted %v", want.Name, i, got.F64[i], want.F64[i])
		}
	}
	for i := range want.I64 {
		if want.I64[i] != got.I64[i] {
			return fmt.Sprintf("%s[%d] = %d, uninterrupted %d", want.Name, i, got.I64[i], want.I64[i])
		}
	}
	return ""
}
