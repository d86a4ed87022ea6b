package trainer

import (
	"bytes"
	"context"
	"io"
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
