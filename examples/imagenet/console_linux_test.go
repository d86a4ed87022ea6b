//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A job launched by gprun with its output to a pipe (not a terminal): the trainer writes
// whole lines (no progress bar redraws) and gprun prefixes each line once.
func TestConsoleThroughGprunIsWholeLines(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a 2-rank job")
	}
	out := filepath.Join(t.TempDir(), "run")
	j := startJob(t, nil, "-data", folderCopy(t), "-arch", "resnet18", "-image-size", "16", "-epochs", "1",
		"-b", "8", "-j", "1", "-resume", "none", "-print-freq", "2", "-max-steps", "4", "-out", out)
	if !j.wait(3 * time.Minute) {
		t.Fatalf("job did not end within 3 min:\n%s", j.output())
	}
	log := j.output()
	t.Logf("gprun's output:\n%s", log)
	if j.exitCode() != 0 {
		t.Fatalf("gprun exited %d", j.exitCode())
	}
	var progress int
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if strings.Contains(l, "\r") || strings.Count(l, "[rank") > 1 {
			t.Errorf("line %q: a redraw or more than one prefix", l)
		}
		if strings.HasPrefix(l, "[rank0]: epoch 1/1  [") {
			progress++
		}
	}
	if progress != 2 {
		t.Errorf("%d progress lines, want 2 (steps 2 and 4 of -print-freq 2)", progress)
	}
	if !strings.Contains(log, "[rank0]: summary: 4 steps") || strings.Contains(log, "top-1") {
		t.Errorf("summary missing, or it reports an accuracy without a validation")
	}
}
