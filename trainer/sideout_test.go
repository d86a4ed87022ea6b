package trainer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// A plot that cannot be written (a directory where curves.png goes) is skipped with one
// warning naming it, however often the run tries; the run ends with its checkpoint and a
// summary that lists no plot.
func TestPlotFailureIsOneWarning(t *testing.T) {
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "curves.png", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig(t, out)
	cfg.Arch, cfg.Epochs, cfg.Resume = "resnet8", 2, "none"
	cfg.Group = comm.NewLocalGroups(1)[0]

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	var logged bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&logged, r); close(copied) }()
	var console bytes.Buffer
	res, err := fitRun(context.Background(), cfg, &console)
	os.Stderr = stderr
	w.Close()
	<-copied
	t.Logf("stderr:\n%s", logged.String())
	if err != nil {
		t.Fatalf("the run ended on its plot: %v", err)
	}
	if res.PlotPath != "" || strings.Contains(console.String(), "plot ") {
		t.Errorf("the summary names a plot that was not written: %q", res.PlotPath)
	}
	if _, err := os.Stat(res.Checkpoint); err != nil {
		t.Errorf("no checkpoint: %v", err)
	}
	if n := strings.Count(logged.String(), "plot failed"); n != 1 {
		t.Errorf("%d plot warnings over 2 epochs and the end, want 1", n)
	}
	if !strings.Contains(logged.String(), filepath.Join(out, "curves.png")) {
		t.Errorf("the warning does not name curves.png")
	}
}

// The plot each epoch draws in the background is the plot of the whole log once Fit
// returns: byte for byte what a synchronous Metrics.Plot of the final log draws, with the
// last epoch's validation in it, and no drawing is left running.
func TestBackgroundPlotIsTheFinalLogs(t *testing.T) {
	dir := t.TempDir()
	src := DatasetSource{Train: blobs{24}, Val: blobs{12}, Classes: 3, Workers: 1}
	res := fitWorld(t, 2, Graph(dense).Named("dense"), src, func() []Option {
		return []Option{WithBatchSize(8), WithEpochs(3), WithDir(dir), WithOptimizer(SGD(0.5, 0.9)), WithOutput(io.Discard),
			WithTimelines(0), WithProgress("log", 1)}
	})
	r := res[0]
	if r.PlotPath != filepath.Join(dir, "curves.png") {
		t.Fatalf("plot %q, want %s", r.PlotPath, filepath.Join(dir, "curves.png"))
	}
	recs := readRecords(t, r.MetricsPath)
	if last := recs[len(recs)-1]; last.Kind != "val" || last.Step != 9 {
		t.Fatalf("the log ends with %+v, want the validation of step 9", last)
	}
	got, err := os.ReadFile(r.PlotPath)
	if err != nil {
		t.Fatal(err)
	}
	m, err := OpenMetrics(r.MetricsPath, r.Steps)
	if err != nil {
		t.Fatal(err)
	}
	sync := filepath.Join(t.TempDir(), "sync.png")
	if err := m.Plot(sync); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(sync)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("curves.png (%d bytes) is not the plot of the final log (%d bytes)", len(got), len(want))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("a plot's temporary file %s is left", e.Name())
		}
	}
}

// TestStaleTempsRemoved: temporaries that an attempt killed mid-write left in the run
// directory (every side output's and a checkpoint's) are gone after the next run, which
// writes those files again; a file of another program's that looks like one stays.
func TestStaleTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := []string{".curves.png.tmp-11", ".metrics.jsonl.tmp-12", ".timeline.json.tmp-13", ".timeline-rank0.json.tmp-14",
		".timeline-rank1.json.tmp-15", ".ckpt-000000003.npz.tmp-16"}
	keep := []string{".notes.txt.tmp-17", "notes.txt"}
	for _, f := range append(append([]string{}, stale...), keep...) {
		writeFile(t, filepath.Join(dir, f), "torn")
	}
	src := DatasetSource{Train: blobs{24}, Val: blobs{12}, Classes: 3, Workers: 1}
	res := fitWorld(t, 2, Graph(dense).Named("dense"), src, func() []Option {
		return []Option{WithBatchSize(8), WithEpochs(1), WithDir(dir), WithOptimizer(SGD(0.5, 0.9)), WithOutput(io.Discard)}
	})
	if res[0].PlotPath == "" || len(res[0].TimelinePaths) != 3 || res[0].Checkpoint == "" {
		t.Fatalf("the run wrote plot %q, timelines %q, checkpoint %q: want each", res[0].PlotPath, res[0].TimelinePaths, res[0].Checkpoint)
	}
	for _, f := range stale {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the stale temporary %s is still there (%v)", f, err)
		}
	}
	for _, f := range keep {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s, not the run's, was removed: %v", f, err)
		}
	}
}
