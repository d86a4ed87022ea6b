package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// Rank 0 alone fails to write its checkpoint (a directory is in the way, as a full disk
// would fail it) while rank 1 goes on to the next step's gradient all-reduce: rank 0 aborts
// the group with its error, rank 1's all-reduce fails at once naming it, and the launcher
// reports rank 0's reason, instead of the job hanging until the 30 min collective timeout.
func TestLoneCheckpointFailureEndsJob(t *testing.T) {
	if testing.Short() {
		t.Skip("launches processes")
	}
	cfg := smallConfig(t, t.TempDir())
	cfg.Resume, cfg.CkptEvery, cfg.PrintFreq = "none", 4, 100
	bad := filepath.Join(cfg.Out, "ckpt-000000004.npz")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{"GP_TRAINER_TEST_WORKER=" + string(js), "OPENBLAS_NUM_THREADS=1"}, Stdout: &out, Stderr: &out,
	})
	took := time.Since(start)
	var we *launch.WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || !strings.Contains(we.Reason, bad) {
		t.Fatalf("err = %v, want rank 0's failure naming %s\n%s", err, bad, out.String())
	}
	if took > time.Minute {
		t.Errorf("the job took %v to end", took)
	}
	t.Logf("job ended %v after start (4 steps, then rank 0's checkpoint failed):\n%s\n%s", took.Round(time.Millisecond), we.Report(), out.String())
}
