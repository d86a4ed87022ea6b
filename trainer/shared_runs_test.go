package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Several tests compare against the same run: TestDeviceZero3World2MatchesCPU's rows with
// the matrix's flags train exactly the configurations of TestDeviceMatrix's resnet8 zero3
// rows, on the CPU and on the devices, and TestAsyncStreamsTrainerMatrix's CPU references
// are the matrix's. Each such configuration trains once per test binary (sharedRun) into a
// folder that every test asking for it reads, and no test writes; TestMain removes the
// folders. Each test still makes all of its own comparisons on those outputs.
var shared struct {
	mu   sync.Mutex
	dir  string // the folder of every shared run's output, made on first use
	runs map[string]*sharedResult
}

// sharedResult is one shared run: its output folder, the output of its ranks and its error.
type sharedResult struct {
	dir, out string
	err      error
}

// sharedRun trains cfg (its Out ignored) at world size world, or returns the run an earlier
// test made of the same configuration at the same world size under the same GP_
// environment (the emulator's seed and delays are there). CPU runs (no Device) train in this
// process on goroutine ranks; device runs must be world > 1, launched as gprun launches them
// (launchJob), so that no process counter (gemmCalls) of this process moves. It returns the
// run's folder, to be read only, its output and its error: a failed CPU run fails the test.
func sharedRun(t *testing.T, world int, cfg runConfig) (dir, out string, err error) {
	t.Helper()
	if cfg.Group != nil || cfg.Solver != nil {
		t.Fatal("sharedRun: a configuration with a Group or a Solver cannot be shared")
	}
	if cfg.Device != "" && world < 2 {
		t.Fatalf("sharedRun: -device %s at world %d runs in this process; share only launched device runs (world > 1)", cfg.Device, world)
	}
	cfg.Out = ""
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GP_") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	key := fmt.Sprintf("world %d %s %q", world, js, env)

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if r, ok := shared.runs[key]; ok {
		return r.dir, r.out, r.checked(t, cfg)
	}
	if shared.dir == "" {
		if shared.dir, err = os.MkdirTemp("", "gp-trainer-shared"); err != nil {
			t.Fatal(err)
		}
		shared.runs = map[string]*sharedResult{}
	}
	r := &sharedResult{}
	if r.dir, err = os.MkdirTemp(shared.dir, "run"); err != nil {
		t.Fatal(err)
	}
	cfg.Out = r.dir
	if cfg.Device != "" {
		r.out, r.err = launchJob(world, cfg)
	} else {
		var b strings.Builder
		_, errs := runConfigs(world, cfg, &b)
		r.out = b.String()
		for rank, err := range errs {
			if err != nil {
				r.err = fmt.Errorf("rank %d: %w", rank, err)
				break
			}
		}
	}
	shared.runs[key] = r
	return r.dir, r.out, r.checked(t, cfg)
}

// checked is r's error; a CPU run's error fails the test, as trainOn's does.
func (r *sharedResult) checked(t *testing.T, cfg runConfig) error {
	t.Helper()
	if r.err != nil && cfg.Device == "" {
		t.Fatalf("CPU run: %v\n%s", r.err, r.out)
	}
	return r.err
}

// removeShared deletes the shared runs' folders.
func removeShared() {
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}
