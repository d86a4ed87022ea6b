package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

const workerVar = "GP_CLUSTERTEST_WORKER"

func TestMain(m *testing.M) { proctest.Main(m, workerVar, worker) }

// worker is one rank of a data-parallel step as DDP runs it, under whatever launcher
// started it: the group from the launcher's environment (comm.InitFromEnv), rank 0's
// parameters broadcast, each rank's gradient averaged by an all-reduce; every rank checks
// the result and prints its place.
func worker(string) error {
	ctx := context.Background()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(20*time.Second), comm.WithConnectTimeout(20*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	env, _ := launchenv.FromOS()
	params := make(comm.F32, 1000)
	grad := make(comm.F32, 1000)
	for i := range params {
		params[i] = float32(g.Rank()*1000 + i)
		grad[i] = float32(g.Rank() + 1)
	}
	if err := g.Broadcast(params, 0).Wait(ctx); err != nil {
		return err
	}
	if err := g.AllReduce(grad, comm.Sum).Wait(ctx); err != nil {
		return err
	}
	n := g.Size()
	want := float32(n*(n+1)/2) / float32(n)
	for i := range params {
		grad[i] /= float32(n)
		if params[i] != float32(i) || grad[i] != want {
			return fmt.Errorf("rank %d: element %d: param %v grad %v, want %v and %v", g.Rank(), i, params[i], grad[i], i, want)
		}
	}
	fmt.Printf("rank %d of %d local %d launcher %s master %s:%d via %s: ok\n", g.Rank(), n, env.LocalRank,
		env.Launcher, env.MasterAddr, env.MasterPort, comm.TransportOf(g))
	return nil
}

// namespaced returns the command line that runs args in fresh network and pid namespaces
// (only loopback; every process dies with the namespace's first), or nil with the reason
// when this machine cannot make them.
func namespaced(t *testing.T, script string, args ...string) ([]string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, "not root: the launcher's daemons run in network and pid namespaces, which need root"
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return nil, "no unshare (util-linux) to make namespaces"
	}
	if out, err := exec.Command("unshare", "--net", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("unshare --net --pid: %v: %s", err, bytes.TrimSpace(out))
	}
	return append([]string{"unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", script, "ns"}, args...), ""
}

// runBounded runs argv with the worker's environment, killing it after limit; it returns
// the combined output and the exit error. Killing the unshare at the head of argv ends
// its namespace's processes with it.
func runBounded(t *testing.T, limit time.Duration, env []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v: %w", limit, ctx.Err())
	}
	t.Logf("%s: %v", strings.Join(argv[:min(len(argv), 3)], " "), time.Since(start).Round(time.Millisecond))
	return out.String(), err
}

func version(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// mpirun -np 2 runs the data-parallel step; the workers find their ranks in OMPI_COMM_WORLD_*.
func TestMPIRun(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("no mpirun: apt-get install openmpi-bin (scripts/install-deps.sh)")
	}
	t.Logf("%s", version("mpirun", "--version"))
	mpirun := []string{"mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", workerVar, os.Args[0], "-test.run=^$"}
	if os.Geteuid() == 0 {
		mpirun = append(mpirun[:1], append([]string{"--allow-run-as-root"}, mpirun[1:]...)...)
	}
	argv, why := namespaced(t, `ip link set lo up && "$@"`, mpirun...)
	if argv == nil {
		t.Logf("running mpirun outside a namespace: %s", why)
		argv = mpirun
	}
	out, err := runBounded(t, 60*time.Second, []string{workerVar + "=ddp", "OMPI_MCA_plm_rsh_agent=", "OMPI_MCA_oob_tcp_if_include=lo",
		"OMPI_MCA_btl_tcp_if_include=lo"}, argv...)
	for r := range 2 {
		if want := fmt.Sprintf("rank %d of 2 local %d launcher openmpi master 127.0.0.1:", r, r); err != nil || !strings.Contains(out, want) {
			t.Errorf("mpirun: %v; want %q in the output:\n%s", err, want, out)
		}
	}
}

// A one-node SLURM cluster (munged, slurmctld, slurmd) started for the test runs srun -n 2
// with the data-parallel step; then again with a stale RANK exported, which every rank
// refuses naming both values.
func TestSrun(t *testing.T) {
	for _, bin := range []string{"srun", "slurmctld", "slurmd", "munged", "sinfo"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s: apt-get install slurm-wlm munge (scripts/install-deps.sh)", bin)
		}
	}
	script, err := filepath.Abs("testdata/slurm.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	self := os.Args[0]
	// The second srun runs over TCP: its rank 0 agrees with the stale RANK=0 and starts the
	// group while rank 1 refuses, and --kill-on-bad-exit then SIGKILLs rank 0 in the middle
	// of setting up its shared-memory segment, which it could not unlink (comm's shm
	// segment is unlinked once every peer has mapped it; a kill before that leaks it).
	job := fmt.Sprintf(`srun -n 2 %[1]s -test.run='^$'; echo "srun exit $?"; RANK=0 WORLD_SIZE=2 GP_COMM_TRANSPORT=tcp srun -n 2 --kill-on-bad-exit=1 %[1]s -test.run='^$'; echo "srun exit $?"`, self)
	argv, why := namespaced(t, `bash "$@"`, script, filepath.Join(dir, "slurm"), "bash", "-c", job)
	if argv == nil {
		t.Skip(why)
	}
	out, err := runBounded(t, 60*time.Second, []string{workerVar + "=ddp"}, argv...)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 99 {
			t.Skipf("the SLURM daemons did not start here:\n%s", out)
		}
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("%s", firstLine(out, "slurm-wlm"))
	first, second, _ := strings.Cut(out, "srun exit")
	for r := range 2 {
		if want := fmt.Sprintf("rank %d of 2 local %d launcher slurm master ", r, r); !strings.Contains(first, want) {
			t.Errorf("want %q in the first srun's output:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(second, " 0") {
		t.Errorf("first srun failed:\n%s", out)
	}
	if want := "RANK=0 (torchrun variable, without gprun or torchrun) but SLURM_PROCID=1 (slurm)"; !strings.Contains(second, want) ||
		!strings.Contains(second, "srun exit 1") {
		t.Errorf("second srun: want exit 1 and %q:\n%s", want, out)
	}
}

func firstLine(out, prefix string) string {
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
