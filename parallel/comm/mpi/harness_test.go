package mpi_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

// The test binary doubles as the ranks of the MPI jobs: mpirun starts it with
// GP_MPI_TEST_WORKER naming the scenario, and each copy runs that scenario as one rank.
const workerVar = "GP_MPI_TEST_WORKER"

func TestMain(m *testing.M) { proctest.Main(m, workerVar, worker) }

// scenarios are the workers' programs, by name.
var scenarios = map[string]func() error{}

func worker(scenario string) error {
	f, ok := scenarios[scenario]
	if !ok {
		return fmt.Errorf("no scenario %q", scenario)
	}
	return f()
}

// requireMPI skips the test where mpirun or OpenMPI's library is missing.
func requireMPI(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts mpirun")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("no mpirun: apt-get install openmpi-bin (scripts/install-deps.sh)")
	}
	if err := mpi.Load(); err != nil {
		t.Skipf("OpenMPI's library does not load: %v", err)
	}
}

// job is what one mpirun run left.
type job struct {
	out  string
	err  error
	took time.Duration
}

// mpirun runs np copies of this test binary as scenario under mpirun, with env added to
// every rank's environment, and kills the job (mpirun and, through it, the ranks) after
// limit.
func mpirun(t *testing.T, np int, scenario string, limit time.Duration, env ...string) job {
	t.Helper()
	args := []string{"--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(np)}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	env = append([]string{workerVar + "=" + scenario, "OPENBLAS_NUM_THREADS=1", "OMPI_MCA_btl_tcp_if_include=lo",
		"OMPI_MCA_oob_tcp_if_include=lo", "OMPI_MCA_btl_vader_single_copy_mechanism=none", "OMPI_MCA_rmaps_base_oversubscribe=1"}, env...)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		args = append(args, "-x", name)
	}
	args = append(args, os.Args[0], "-test.run=^$")
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	j := job{out: out.String(), err: err, took: time.Since(start)}
	if ctx.Err() != nil {
		j.err = fmt.Errorf("mpirun killed after %v: %w", limit, ctx.Err())
	}
	t.Logf("mpirun -np %d %s: %v in %v", np, scenario, j.err, j.took.Round(time.Millisecond))
	return j
}
