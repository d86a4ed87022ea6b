// Package proctest runs multi-process tests: the test binary re-executes itself as the ranks
// of a job, configured by the torchrun variables over loopback (127.0.0.1, a port the OS
// picks), and each re-executed binary runs one worker scenario instead of the tests.
package proctest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Main is the body of a package's TestMain: when the environment variable workerVar is set,
// the binary is a worker, runs worker(scenario) and exits (status 1 on error); otherwise it
// runs the tests.
func Main(m *testing.M, workerVar string, worker func(scenario string) error) {
	if sc := os.Getenv(workerVar); sc != "" {
		if err := worker(sc); err != nil {
			fmt.Fprintln(os.Stderr, "worker error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Job is what Spawn's ranks left: by rank, their combined output, exit error and pid.
type Job struct {
	Outputs []string
	Errs    []error
	Pids    []int
}

// Spawn runs n ranks of scenario (workerVar=scenario, RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) and waits for them; env, when set, adds variables per rank. Workers are
// expected to stop by themselves; after a minute the rest are killed.
func Spawn(t testing.TB, n int, workerVar, scenario string, env func(rank int) []string) Job {
	t.Helper()
	port := FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerVar+"="+scenario, "RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		if env != nil {
			cmd.Env = append(cmd.Env, env(r)...)
		}
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	job := Job{Outputs: make([]string, n), Errs: make([]error, n), Pids: make([]int, n)}
	for r, cmd := range cmds {
		job.Errs[r] = cmd.Wait()
		job.Outputs[r] = outs[r].String()
		job.Pids[r] = cmd.Process.Pid
	}
	return job
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
