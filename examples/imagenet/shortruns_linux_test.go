//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/trainer"
)

// Runs of 1, 2 and 3 optimizer steps, ending at an epoch's end (with its validation) or
// inside an epoch (-max-steps, no validation), under every CPU strategy as a user launches
// it (ddp and zero3: gprun with 2 ranks; none and dp: one process), and runs whose
// learning rate reaches 0 (cosine) or whose loss diverges to NaN or Inf (-lr 1e30): each
// job ends with exit status 0, its summary and a metrics log that reads back, never a panic
// from a side output.
func TestShortRunsEndWithSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("launches 26 jobs")
	}
	root := t.TempDir()
	type run struct {
		name  string
		steps int
		val   bool
		extra []string
	}
	var runs []run
	for steps := 1; steps <= 3; steps++ {
		runs = append(runs, run{fmt.Sprintf("%d steps, validation", steps), steps, true, []string{"-sched", "cosine"}},
			run{fmt.Sprintf("%d steps, no validation", steps), steps, false, nil})
	}
	for _, strategy := range []string{"ddp", "zero3", "none", "dp"} {
		cases := runs
		if strategy == "ddp" {
			cases = append(cases, run{"diverged loss", 2, true, []string{"-lr", "1e30"}},
				run{"diverged loss, no validation", 2, false, []string{"-lr", "1e30"}})
		}
		for _, rc := range cases {
			t.Run(strategy+"/"+rc.name, func(t *testing.T) {
				// 2 classes, batch 8: an epoch of 4k images per class is k steps.
				perClass, maxSteps := 4*rc.steps, 0
				if !rc.val {
					perClass, maxSteps = 16, rc.steps
				}
				data := filepath.Join(root, fmt.Sprintf("data-%d", perClass))
				out := filepath.Join(t.TempDir(), "run")
				args := append([]string{"-data-format", "synthetic", "-data", data, "-synthetic-classes", "2",
					"-synthetic-train", fmt.Sprint(perClass), "-synthetic-val", "4", "-synthetic-size", "16",
					"-arch", "resnet8", "-image-size", "16", "-b", "8", "-j", "1", "-quiet", "-resume", "none",
					"-epochs", "1", "-max-steps", fmt.Sprint(maxSteps), "-strategy", strategy, "-out", out}, rc.extra...)
				log, code := launchRun(t, strategy == "ddp" || strategy == "zero3", args)
				if code != 0 || strings.Contains(log, "panic") {
					t.Fatalf("exit status %d:\n%s", code, log)
				}
				if !strings.Contains(log, fmt.Sprintf("summary: %d steps", rc.steps)) {
					t.Errorf("no summary of %d steps:\n%s", rc.steps, log)
				}
				if rc.val != strings.Contains(log, "val top-1") {
					t.Errorf("validation reported %v, want %v:\n%s", !rc.val, rc.val, log)
				}
				recs := logRecords(t, filepath.Join(out, "metrics.jsonl"))
				last := trainer.Record{}
				for _, r := range recs {
					if r.Kind == "train" {
						last = r
					}
				}
				if last.Step != int64(rc.steps) {
					t.Errorf("last train record at step %d, want %d", last.Step, rc.steps)
				}
				if diverged := len(rc.extra) > 0 && rc.extra[0] == "-lr"; diverged {
					// The case is what it says: the loss is not finite, and a validation of
					// the diverged model hits nothing.
					if !strings.Contains(log, "final train loss NaN") && !strings.Contains(log, "final train loss +Inf") {
						t.Errorf("the loss did not diverge:\n%s", log)
					}
					if rc.val && !strings.Contains(log, "val top-1 0.00% top-5 0.00%") {
						t.Errorf("a NaN model's validation hits:\n%s", log)
					}
				}
				if rc.val && len(rc.extra) > 0 && rc.extra[0] == "-sched" && last.LR != 0 {
					t.Errorf("cosine schedule's last learning rate %g, want 0", last.LR)
				}
			})
		}
	}
}

// launchRun runs the trainer with args, through gprun on 2 ranks or as one process, and
// returns its combined output and exit status.
func launchRun(t *testing.T, gprunIt bool, args []string) (string, int) {
	t.Helper()
	if gprunIt {
		j := startJob(t, nil, args...)
		if !j.wait(3 * time.Minute) {
			t.Fatalf("job did not end within 3 min:\n%s", j.output())
		}
		return j.output(), j.exitCode()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), testMainEnv+"=1", "OPENBLAS_NUM_THREADS=1")
	b, _ := cmd.CombinedOutput()
	return string(b), cmd.ProcessState.ExitCode()
}

// logRecords reads a metrics log; every line must parse.
func logRecords(t *testing.T, path string) []trainer.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []trainer.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r trainer.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s line %d: %v", path, len(recs)+1, err)
		}
		recs = append(recs, r)
	}
	return recs
}
