package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// TestThirtyLines counts the program beyond its model as the README's tables count: imports,
// comments and blank lines left out, and the model (convnet and its weight helper) too. The
// budget is 30 lines.
func TestThirtyLines(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	n, inModel, inImport := 0, false, false
	for _, line := range strings.Split(string(src), "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "func convnet(") || strings.HasPrefix(line, "func weight("):
			inModel = true
		case inModel:
			inModel = line != "}"
		case l == "import (":
			inImport = true
		case inImport:
			inImport = l != ")"
		case l == "" || strings.HasPrefix(l, "//") || strings.HasPrefix(l, "package "):
		default:
			n++
		}
	}
	t.Logf("%d lines beyond the model", n)
	if n > 30 {
		t.Errorf("the program has %d lines beyond its model; the budget is 30", n)
	}
}

// TestTrainsAndResumesUnderGprun runs the program under gprun with 2 processes for one
// epoch, then again for two: the second run resumes from the first one's checkpoint (step
// 20) and ends with a checkpoint bit for bit equal (every parameter and gorgonia's Adam
// moments) to that of a run of two epochs in one go; the metrics log holds every logged
// step once and a validation per epoch.
func TestTrainsAndResumesUnderGprun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gprun and the program")
	}
	dir := t.TempDir()
	build := func(name, pkg string) string {
		out := filepath.Join(dir, name)
		if msg, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
		return out
	}
	prog, gprun := build("trainer", "."), build("gprun", "../../../cmd/gprun")
	run := func(out string, epochs string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gprun, "--nproc-per-node", "2", "--", prog, "-epochs", epochs, "-out", out)
		cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
		msg, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("epochs %s: %v\n%s", epochs, err, msg)
		}
		return string(msg)
	}
	resumed, whole := filepath.Join(dir, "resumed"), filepath.Join(dir, "whole")
	run(resumed, "1")
	if out := run(resumed, "2"); !strings.Contains(out, "resumed from "+filepath.Join(resumed, "ckpt-000000020.npz")+" at step 20") {
		t.Fatalf("the second run did not resume from step 20:\n%s", out)
	}
	run(whole, "2")
	a := load(t, filepath.Join(whole, "ckpt-000000040.npz"))
	b := load(t, filepath.Join(resumed, "ckpt-000000040.npz"))
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("final checkpoints hold %d and %d entries", len(a), len(b))
	}
	for name, want := range a {
		got, ok := b[name]
		if !ok || len(got) != len(want) {
			t.Fatalf("entry %s: %d values resumed, %d in one go", name, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("entry %s[%d]: bits %#x resumed, %#x in one go", name, i, got[i], want[i])
			}
		}
	}
	steps, vals := records(t, filepath.Join(resumed, "metrics.jsonl"))
	if want := []int64{5, 10, 15, 20, 25, 30, 35, 40}; !equal(steps, want) || vals != 2 {
		t.Errorf("metrics.jsonl: train records at steps %v and %d validations, want %v and 2", steps, vals, want)
	}
}

// load reads a checkpoint's entries by name, each value as its bits.
func load(t *testing.T, path string) map[string][]uint64 {
	t.Helper()
	entries, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]uint64{}
	for _, e := range entries {
		var v []uint64
		for _, x := range e.F32 {
			v = append(v, uint64(math.Float32bits(x)))
		}
		for _, x := range e.F64 {
			v = append(v, math.Float64bits(x))
		}
		for _, x := range e.I64 {
			v = append(v, uint64(x))
		}
		m[e.Name] = v
	}
	return m
}

// records returns the steps of a metrics log's training records and its validation count.
func records(t *testing.T, path string) (steps []int64, vals int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r struct {
			Kind string
			Step int64
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch r.Kind {
		case "train":
			steps = append(steps, r.Step)
		case "val":
			vals++
		}
	}
	return steps, vals
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
