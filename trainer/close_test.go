package trainer

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// offloadMappings lists the lines of /proc/self/maps that map files under dir.
func offloadMappings(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, dir) {
			lines = append(lines, l)
		}
	}
	return lines
}

// A run releases what its engine holds: after a ZeRO-3 run with the optimizer state on disk
// (mapped files under OUT/offload), whether it finished or failed after the engine was
// built, the process maps none of those files. An engine left open keeps them mapped for
// the life of the process.
func TestRunReleasesItsEngine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps")
	}
	for _, tc := range []struct {
		name   string
		resume string // a checkpoint that cannot be read fails the run after the engine is built
	}{
		{"finished", "auto"},
		{"failed at resume", "missing-checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := smallConfig(t, out)
			cfg.Strategy, cfg.Offload, cfg.Optimizer = "zero3", "disk", "adamw"
			cfg.Epochs, cfg.MaxSteps, cfg.Resume = 1, 2, filepath.Join(out, tc.resume)
			if tc.resume == "auto" {
				cfg.Resume = "auto"
				runWorld(t, 2, cfg)
			} else {
				runWorldFails(t, 2, cfg)
			}
			if _, err := os.Stat(filepath.Join(out, "offload")); err != nil {
				t.Fatalf("the run wrote no offload files under %s: %v", out, err)
			}
			if m := offloadMappings(t, out); len(m) > 0 {
				t.Errorf("after the run the process still maps %d offload files:\n%s", len(m), strings.Join(m, "\n"))
			}
		})
	}
}

// runWorldFails runs the trainer on world goroutine ranks, each of which must fail.
func runWorldFails(t *testing.T, world int, cfg runConfig) {
	t.Helper()
	_, errs := runConfigs(world, cfg, io.Discard)
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: the run did not fail", r)
		}
		t.Logf("rank %d: %v", r, err)
	}
}
