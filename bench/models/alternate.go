package main

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// Note [Alternated windows]
//
// This machine's speed moves by up to a third within minutes (the sgemm roof ranged
// 102-159 GFLOP/s in one run). A pair measured as two fresh processes, ours then PyTorch's,
// spans process start, model building, imports and warm-up on both sides, about half a
// minute for swin_t, and a drift within that span lands on one side only: swin_t's pairs
// ranged 1.10x-1.65x in one run.
//
// So both sides are built and warmed up once, as two live processes that wait on stdin, and
// each pair is one timed window of ours and one of PyTorch's, back to back, while the other
// side sleeps. Each window starts with one untimed step (the other side's window has just
// used the caches) and times at least the workload's steps and -min-seconds. The order
// alternates from pair to pair (ours first, then PyTorch first), so that a steady drift
// favours neither side.

// stepTimeout bounds how long a server may take to get ready or to answer one window.
const stepTimeout = 10 * time.Minute

// server is a measuring process that answers a window per line of stdin (-serve, or
// torch_bench.py's serve).
type server struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *benchutil.Output
	err    error // the first failure; the server is unusable after it
}

// startServer starts name with args and env, and waits until it prints "ready" (model
// built, warm-up done). On error the returned server is nil-safe to close.
func startServer(env []string, name string, args ...string) (*server, error) {
	s := &server{name: filepath.Base(name), stderr: &benchutil.Output{}, lines: make(chan string, 4)}
	s.cmd = exec.Command(name, args...)
	s.cmd.Env = env
	s.cmd.Stderr = s.stderr
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	for {
		line, err := s.next()
		if err != nil {
			s.close()
			return nil, err
		}
		if line == "ready" {
			return s, nil
		}
	}
}

// next returns the server's next line of stdout, or an error with its stderr when it ended
// or took longer than stepTimeout.
func (s *server) next() (string, error) {
	select {
	case line, ok := <-s.lines:
		if !ok {
			s.err = fmt.Errorf("%s ended: %s", s.name, strings.TrimSpace(s.stderr.String()))
			return "", s.err
		}
		return line, nil
	case <-time.After(stepTimeout):
		s.err = fmt.Errorf("%s: no answer within %v: %s", s.name, stepTimeout, strings.TrimSpace(s.stderr.String()))
		return "", s.err
	}
}

// window asks for one timed window and returns images/s and CPU s/step.
func (s *server) window() (ips, cpu float64, err error) {
	if s.err != nil {
		return 0, 0, s.err
	}
	if _, err := io.WriteString(s.in, "window\n"); err != nil {
		s.err = fmt.Errorf("%s: %w: %s", s.name, err, strings.TrimSpace(s.stderr.String()))
		return 0, 0, s.err
	}
	line, err := s.next()
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		s.err = fmt.Errorf("%s printed %q, want images/s and CPU s/step", s.name, line)
		return 0, 0, s.err
	}
	if ips, err = strconv.ParseFloat(f[0], 64); err == nil {
		cpu, err = strconv.ParseFloat(f[1], 64)
	}
	if err != nil {
		s.err = fmt.Errorf("%s printed %q: %w", s.name, line, err)
	}
	return ips, cpu, s.err
}

// close ends the server (end of stdin) and waits for it, killing it after a minute. Safe on
// a nil server.
func (s *server) close() error {
	if s == nil {
		return nil
	}
	s.in.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && s.err == nil {
			return fmt.Errorf("%s: %w: %s", s.name, err, strings.TrimSpace(s.stderr.String()))
		}
		return nil
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not end within a minute of its input's end; killed", s.name)
	}
}

// pair times one window of ours and one of PyTorch's (PyTorch's first when torchFirst).
// tv is -1 when PyTorch is unavailable (terr) or failed in this window (torch.err says
// why); only a failure of ours is an error.
func pair(ours, torch *server, terr error, torchFirst bool) (goIPS, goCPU, tv, tCPU float64, err error) {
	tv = -1
	runTorch := func() {
		if terr != nil {
			return
		}
		if v, c, err := torch.window(); err == nil {
			tv, tCPU = v, c
		}
	}
	if torchFirst {
		runTorch()
	}
	if goIPS, goCPU, err = ours.window(); err != nil {
		return 0, 0, 0, 0, err
	}
	if !torchFirst {
		runTorch()
	}
	return goIPS, goCPU, tv, tCPU, nil
}
