// Package benchutil holds what the benchmarks under bench/ share: medians of repetitions,
// the process's CPU time, a launcher of benchmark processes in a torchrun environment, a
// collector of a child's output (Output), the stacks of a CPU profile (ReadTraces) and the op
// and kernel each ran (Sample.Op, Sample.Kernel), and what every results file records about
// how it was made (Provenance: the reproducing command and the machine), with the writing
// of that file (Provenance.Save).
package benchutil

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Median is the middle value of xs (the mean of the middle two for an even count), 0 for
// none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// FirstLine is s up to its first newline (error messages in one-line table cells).
func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Launch starts n processes as the ranks of one job, each with the torchrun variables
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
// MASTER_PORT) added to this process's environment and env; cmdline(rank) is the program
// and its first arguments, args follow. Each process must print its result as a JSON line on stdout (the last one that
// decodes into T counts); stderr passes through. It fails, naming the ranks, when a process
// fails, prints no result, or the job outlives timeout.
func Launch[T any](n int, cmdline func(rank int) []string, args, env []string, timeout time.Duration) ([]T, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		c := cmdline(r)
		cmd := exec.CommandContext(ctx, c[0], append(c[1:], args...)...)
		cmd.Env = append(append(os.Environ(), env...), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(n), "LOCAL_WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], os.Stderr
		if err := cmd.Start(); err != nil {
			for _, started := range cmds[:r] {
				started.Process.Kill()
				started.Wait()
			}
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		cmds[r] = cmd
	}
	res := make([]T, n)
	var errs []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("rank %d: %v", r, err))
			continue
		}
		found := false
		sc := bufio.NewScanner(outs[r])
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &res[r]) == nil {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Sprintf("rank %d printed no result: %q", r, outs[r].String()))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return res, nil
}

// LoadAvg is the machine's one-minute load average, which says how much a measurement
// shared the machine (0 when /proc/loadavg is unreadable, as off Linux).
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
