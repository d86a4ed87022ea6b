package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

func init() {
	scenarios["die"] = dying
	scenarios["stall"] = stalling
	scenarios["abort"] = aborting
}

// failBound is how long after a failure the whole job must be gone: mpirun notices a dead
// rank at once and kills the others; MPI_Abort likewise. The ranks' timeout (60 s) is far
// longer, so a job that ends within the bound was ended by the failure.
const failBound = 20 * time.Second

// Every failure scenario: the job ends (mpirun exits with an error) within failBound, no
// rank reports having survived, and mpirun's output names what happened.
func TestFailuresEndTheJob(t *testing.T) {
	requireMPI(t)
	for _, c := range []struct {
		scenario string
		want     []string // in mpirun's output
	}{
		// Rank 1 is SIGKILLed while rank 0 waits in an all-reduce: checked below.
		{"die", nil},
		// Rank 1 never joins the second all-reduce: rank 0's times out (1 s) and aborts.
		// (mpirun's own "MPI_ABORT was invoked" notice is not asserted: mpirun sometimes
		// fails to print it while tearing the job down, "ORTE_ERROR_LOG: Out of resource".)
		{"stall", []string{"ending the MPI job with MPI_Abort", "rank=0", "rank 0: all-reduce seq 2 (262144 bytes): comm: timeout after 1s"}},
		// Rank 1 calls comm.Abort with a reason while rank 0 waits in an all-reduce.
		{"abort", []string{"ending the MPI job with MPI_Abort", "rank=1", "comm: rank 1 aborted: bad input file"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			j := mpirun(t, 2, c.scenario, failBound+10*time.Second, "GP_COMM_BACKEND=mpi")
			if j.err == nil || strings.Contains(j.err.Error(), "killed after") {
				t.Fatalf("mpirun: %v, want it to fail by itself\n%s", j.err, j.out)
			}
			t.Logf("mpirun output:\n%s", j.out)
			if j.took > failBound {
				t.Errorf("the job took %v to end, want under %v", j.took, failBound)
			}
			if strings.Contains(j.out, "survived") {
				t.Errorf("a rank went on after the failure:\n%s", j.out)
			}
			var ee *exec.ExitError
			if c.scenario == "die" && !strings.Contains(j.out, "rank 1 with PID") && !(errors.As(j.err, &ee) && ee.ExitCode() == 128+9) {
				t.Errorf("mpirun: %v, want exit status 137 (a rank killed by signal 9) or its notice naming rank 1:\n%s", j.err, j.out)
			}
			for _, w := range c.want {
				if !strings.Contains(j.out, w) {
					t.Errorf("want %q in mpirun's output:\n%s", w, j.out)
				}
			}
		})
	}
}

// failingJob is the failure scenarios' rank: a group with a 60 s timeout (or timeout), one
// all-reduce that completes, then rank 1 runs fail while rank 0 waits in a second one.
func failingJob(timeout time.Duration, fail func(g comm.Group)) error {
	ctx := context.Background()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(timeout))
	if err != nil {
		return err
	}
	b := make(comm.F32, 1<<16)
	if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		fail(g)
		time.Sleep(60 * time.Second)
		return errors.New("rank 1 survived its own failure")
	}
	err = g.AllReduce(b, comm.Sum).Wait(ctx)
	fmt.Fprintf(os.Stderr, "rank 0 survived: %v\n", err)
	return err
}

func dying() error {
	return failingJob(60*time.Second, func(comm.Group) { proctest.KillSelf() })
}

func stalling() error {
	return failingJob(time.Second, func(comm.Group) {})
}

func aborting() error {
	return failingJob(60*time.Second, func(g comm.Group) {
		comm.Abort(context.Background(), g, errors.New("bad input file"))
	})
}

// In a build where libmpi loads, Load reports its path; New outside mpirun is a singleton
// (world 1), which the environment check of comm.InitFromEnv would refuse.
func TestLoad(t *testing.T) {
	if err := mpi.Load(); err != nil {
		t.Skipf("no OpenMPI: %v", err)
	}
	if p := mpi.LibraryPath(); !strings.Contains(p, "libmpi") {
		t.Errorf("LibraryPath %q", p)
	}
}

func init() {
	scenarios["singleton"] = func() error {
		_, err := comm.InitFromEnv(context.Background(), comm.WithConnectTimeout(20*time.Second))
		if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "start the job with mpirun") {
			return fmt.Errorf("InitFromEnv with GP_COMM_BACKEND=mpi outside mpirun: %v, want ErrInvalid saying to use mpirun", err)
		}
		fmt.Println("refused:", err)
		return nil
	}
}

// GP_COMM_BACKEND=mpi in a process that mpirun did not start (here, as if gprun had: RANK
// 0 of WORLD_SIZE 2): MPI makes it a world of one, which InitFromEnv refuses, naming both.
func TestOutsideMPIRun(t *testing.T) {
	requireMPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerVar+"=singleton", "GP_COMM_BACKEND=mpi", "RANK=0", "WORLD_SIZE=2",
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "OMPI_MCA_btl_vader_single_copy_mechanism=none")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rank 0 of 1, the environment (RANK, WORLD_SIZE) says 0 of 2") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}
