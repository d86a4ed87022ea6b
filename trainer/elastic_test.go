package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// TestMain lets the test binary serve as the trainer's worker process: with
// GP_TRAINER_TEST_WORKER set it runs Run with the configuration in that variable (JSON).
func TestMain(m *testing.M) {
	if js := os.Getenv("GP_TRAINER_TEST_WORKER"); js != "" {
		var cfg runConfig
		if err := json.Unmarshal([]byte(js), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := fitRun(ctx, cfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeEmulator()
	removeShared()
	removeTestData()
	os.Exit(code)
}

// launchWorld runs cfg as a real 2-process job through the launcher, restarting it up to
// restarts times, and returns the per-step losses from the metrics log (which must hold
// each step once, see metricsByStep).
func launchWorld(t *testing.T, cfg runConfig, restarts int) []float64 {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: 2, MaxRestarts: restarts, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{"GP_TRAINER_TEST_WORKER=" + string(js), "OPENBLAS_NUM_THREADS=1"}, Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("job failed: %v\n%s", err, out.String())
	}
	return metricsByStep(t, cfg.Out)
}

// A job whose workers crash right after a checkpoint is restarted by the launcher, resumes
// from that checkpoint and follows the uninterrupted run's loss trajectory exactly.
func TestKilledJobResumesSameTrajectory(t *testing.T) {
	if testing.Short() {
		t.Skip("launches processes")
	}
	base := smallConfig(t, "")
	base.PrintFreq, base.Resume = 1, "auto"
	whole := base
	whole.Out = t.TempDir()
	want := launchWorld(t, whole, 0)

	crashed := base
	crashed.Out = t.TempDir()
	crashed.CkptEvery, crashed.Faults.FailAtStep = 8, 10 // checkpoint at step 8, crash after step 10
	got := launchWorld(t, crashed, 1)
	if len(got) != len(want) {
		t.Fatalf("%d steps logged, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %s after the crash and restart, %s uninterrupted",
				i+1, strconv.FormatFloat(got[i], 'g', -1, 64), strconv.FormatFloat(want[i], 'g', -1, 64))
		}
	}
}
