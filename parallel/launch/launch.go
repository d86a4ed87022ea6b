// Package launch starts and supervises the worker processes of a job on one node, the way
// torchrun does: it sets the torchrun environment, prefixes output with ranks, forwards
// signals and restarts the group when a worker fails. When one worker exits non-zero the
// others are stopped at once (SIGTERM, then SIGKILL after Config.StopGrace), and the
// failure is reported as a *WorkerError naming the root cause: the rank whose own failure
// the others followed (see launchenv.ErrorFileEnv), with its status, reason and last stderr
// lines. Workers die with the launcher, even a SIGKILLed one (runOnce). cmd/gprun is its
// command line.
package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// Config describes one node's share of a job.
type Config struct {
	// NProcPerNode is the number of workers on this node (required).
	NProcPerNode int
	// NNodes is the number of nodes (default 1) and NodeRank this node's rank among them.
	NNodes, NodeRank int
	// MasterAddr and MasterPort locate rank 0's store (default 127.0.0.1 and, on a single
	// node, a free port).
	MasterAddr string
	MasterPort int
	// MaxRestarts is how many times the workers are restarted after a failure.
	MaxRestarts int
	// RestartBackoff is the wait before the first restart; it doubles after each attempt
	// that failed within a minute, up to 30 s, and starts again after a longer one (see
	// Note [Restart backoff]). 0 restarts at once.
	RestartBackoff time.Duration
	// RunID names the job (TORCHELASTIC_RUN_ID; default random).
	RunID string
	// Secret is the rendezvous secret given to the workers as GP_RDZV_SECRET (default: the
	// launcher's own GP_RDZV_SECRET, or a random one on a single node).
	Secret string
	// Program and Args are the worker's command line.
	Program string
	Args    []string
	// Env is added to the workers' environment (after the launcher's own).
	Env []string
	// Stdout and Stderr receive the workers' output, each line prefixed "[rankN]: "
	// (default os.Stdout and os.Stderr).
	Stdout, Stderr io.Writer
	// StopGrace is how long a worker gets between SIGTERM and SIGKILL (default 5s; negative:
	// SIGKILL at once, gprun's --term-timeout 0). Where signals cannot be sent to another
	// process (windows) a worker is killed at once.
	StopGrace time.Duration
	// Signals, when set, delivers signals (SIGINT, SIGTERM) to forward to the workers; after
	// one, Run stops restarting and returns once the workers have exited.
	Signals <-chan os.Signal
	// LogDir is where workers' output goes when Redirects or Tee ask for it, in
	// LogDir/RunID/attempt_N/LOCAL_RANK/stdout.log and stderr.log, as torchrun's --log-dir
	// (default: a new temporary directory, named on Stderr, when they ask for it).
	LogDir string
	// Redirects sends the selected streams of each local rank to its log files only, Tee to
	// the files as well as Stdout and Stderr (torchrun's --redirects and --tee).
	Redirects, Tee StreamsByRank
	// Rendezvous, when set, decides NodeRank, MasterAddr and MasterPort (and the secret, when
	// Secret is empty) for each round of a multi-node job, e.g. through etcd (see
	// launch/etcdrdzv); NodeRank, MasterAddr and MasterPort are then ignored.
	Rendezvous Rendezvous
}

// WorkerError reports the worker whose failure ended the job.
type WorkerError struct {
	Rank, LocalRank int
	// Status is the exit status as the OS reports it ("exit status 3", "signal: killed").
	Status string
	// ExitCode is the exit code, or -1 when the worker died of a signal.
	ExitCode int
	// Restarts is the number of restarts that preceded the final failure.
	Restarts int
	// Reason is the failure the worker recorded (comm.Abort's reason, see launchenv.ErrorFileEnv),
	// or "" when it recorded none.
	Reason string
	// Stderr holds the last lines the worker wrote to its standard error (at most
	// stderrTailLines, each cut at stderrTailBytes), without the rank prefix: usually its
	// error message.
	Stderr []string
}

// Error names the rank, its status and its recorded reason, on one line.
func (e *WorkerError) Error() string {
	s := fmt.Sprintf("rank %d (local rank %d) failed: %s (after %d restarts)", e.Rank, e.LocalRank, e.Status, e.Restarts)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Report is Error followed by the last lines of the worker's standard error, each on its own
// line and prefixed with its rank: what gprun prints once per failure. Lines that repeat the
// recorded reason (a worker's "prog: <reason>" as it exits) are left out, so that the report
// states the cause once.
func (e *WorkerError) Report() string {
	var lines []string
	for _, l := range e.Stderr {
		if e.Reason == "" || !strings.Contains(l, e.Reason) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return e.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s; the last lines of its stderr:", e.Error())
	for _, l := range lines {
		fmt.Fprintf(&b, "\n    [rank%d]: %s", e.Rank, l)
	}
	return b.String()
}

// ErrInterrupted is returned when a forwarded signal ended the job.
var ErrInterrupted = errors.New("launch: interrupted by signal")

// Run runs the workers until they all succeed, or a failure remains after MaxRestarts
// restarts (a *WorkerError), or ctx ends or a signal arrives (the workers are stopped).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Rendezvous != nil {
		return runRounds(ctx, cfg)
	}
	if err := cfg.defaults(); err != nil {
		return err
	}
	bo := backoff{first: cfg.RestartBackoff}
	for restart := 0; ; restart++ {
		start := time.Now()
		werr, err := runOnce(ctx, &cfg, restart, nil)
		if err != nil || werr == nil {
			return err
		}
		werr.Restarts = restart
		if restart >= cfg.MaxRestarts {
			return werr
		}
		wait := bo.next(time.Since(start))
		fmt.Fprintf(cfg.Stderr, "gprun: %s\ngprun: restarting the workers (%d/%d)%s\n", werr.Report(), restart+1, cfg.MaxRestarts, restartIn(wait))
		if err := cfg.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func (c *Config) defaults() error {
	if c.NProcPerNode < 1 {
		return fmt.Errorf("launch: nproc-per-node must be at least 1, got %d", c.NProcPerNode)
	}
	if c.Program == "" {
		return errors.New("launch: no program to run")
	}
	c.NNodes = max(1, c.NNodes)
	if c.NodeRank < 0 || c.NodeRank >= c.NNodes {
		return fmt.Errorf("launch: node rank %d outside [0,%d)", c.NodeRank, c.NNodes)
	}
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.MasterPort == 0 {
		if c.NNodes > 1 {
			return errors.New("launch: several nodes need an explicit master port")
		}
		l, err := net.Listen("tcp", net.JoinHostPort(c.MasterAddr, "0"))
		if err != nil {
			return fmt.Errorf("launch: picking a master port: %w", err)
		}
		c.MasterPort = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	if c.RunID == "" {
		c.RunID = RandomHex(8)
	}
	if c.Secret == "" {
		c.Secret = os.Getenv("GP_RDZV_SECRET")
	}
	if c.Secret == "" {
		if c.NNodes > 1 {
			return errors.New("launch: several nodes need a shared secret (GP_RDZV_SECRET or --rdzv-secret)")
		}
		c.Secret = RandomHex(16)
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.StopGrace == 0 {
		c.StopGrace = 5 * time.Second
	}
	if c.LogDir == "" && (c.Redirects.any() || c.Tee.any()) {
		dir, err := os.MkdirTemp("", "gprun-logs-")
		if err != nil {
			return fmt.Errorf("launch: log directory: %w", err)
		}
		c.LogDir = dir
		fmt.Fprintf(c.Stderr, "gprun: the workers' logs go under %s\n", dir)
	}
	return nil
}

type worker struct {
	cmd             *exec.Cmd
	rank, localRank int
	done            chan struct{}
	err             error
	stderr          tail
	errFile         string // where it records its failure (launchenv.ErrorFileEnv)
}

// workerError describes w's failure.
func (w *worker) workerError() *WorkerError {
	we := &WorkerError{Rank: w.rank, LocalRank: w.localRank, Status: w.err.Error(), ExitCode: -1,
		Stderr: w.stderr.lines()}
	var ee *exec.ExitError
	if errors.As(w.err, &ee) {
		we.ExitCode = ee.ExitCode()
	}
	if rec, err := launchenv.ReadFailureRecord(w.errFile); err == nil {
		we.Reason = rec.Message
	}
	return we
}

// rootCause picks, among the workers that failed, the one whose failure the others
// followed: the earliest recorded failure that names no peer as its cause. Without such a
// record it keeps first, the first worker seen to fail.
func rootCause(first *worker, failedWs []*worker) *worker {
	best, bestAt := first, time.Time{}
	for _, w := range failedWs {
		rec, err := launchenv.ReadFailureRecord(w.errFile)
		if err != nil || rec.CauseRank >= 0 {
			continue
		}
		if bestAt.IsZero() || rec.Time.Before(bestAt) {
			best, bestAt = w, rec.Time
		}
	}
	return best
}

// runOnce starts the workers and waits for them; it returns the first failed worker. When
// one fails (exits non-zero), the others get SIGTERM, then SIGKILL after StopGrace.
//
// When stop is closed (a new rendezvous round) the workers are stopped, and runOnce returns
// errRoundChanged unless a worker had failed first.
//
// The workers die with the launcher: on Linux through the parent-death signal, which the
// kernel sends when the thread that started a worker exits, so runOnce keeps one OS thread
// locked from the first start to the last exit; everywhere the workers also inherit the
// read end of a pipe whose write end only this process holds (launchenv.PipeEnv), which
// reports end of file to them when the launcher is gone.
func runOnce(ctx context.Context, cfg *Config, restart int, stop <-chan struct{}) (*WorkerError, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("launch: launcher pipe: %w", err)
	}
	defer pipeW.Close() // after every worker has exited (see the loop below)
	defer pipeR.Close()
	errDir, err := os.MkdirTemp("", "gprun-errors-")
	if err != nil {
		return nil, fmt.Errorf("launch: directory for the workers' error files: %w", err)
	}
	defer os.RemoveAll(errDir)
	n := cfg.NProcPerNode
	world := n * cfg.NNodes
	var outMu sync.Mutex
	ws := make([]*worker, n)
	exited := make(chan *worker, n)
	stopAll := func(sig syscall.Signal) {
		for _, w := range ws {
			if w != nil && w.cmd.Process != nil {
				signalWorker(w.cmd.Process, sig)
			}
		}
	}
	for lr := range n {
		rank := cfg.NodeRank*n + lr
		cmd := exec.Command(cfg.Program, cfg.Args...)
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(rank), "LOCAL_RANK="+strconv.Itoa(lr),
			"WORLD_SIZE="+strconv.Itoa(world), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"GROUP_RANK="+strconv.Itoa(cfg.NodeRank), "GROUP_WORLD_SIZE="+strconv.Itoa(cfg.NNodes),
			"ROLE_RANK="+strconv.Itoa(rank), "ROLE_WORLD_SIZE="+strconv.Itoa(world), "ROLE_NAME=default",
			"MASTER_ADDR="+cfg.MasterAddr, "MASTER_PORT="+strconv.Itoa(cfg.MasterPort),
			"TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(restart),
			"TORCHELASTIC_MAX_RESTARTS="+strconv.Itoa(cfg.MaxRestarts),
			"TORCHELASTIC_RUN_ID="+cfg.RunID, "TORCHELASTIC_USE_AGENT_STORE=False",
			"GP_RDZV_SECRET="+cfg.Secret)
		if n > 1 {
			// As torchrun: several workers per node each get one compute thread unless the
			// user chose otherwise, so that they do not oversubscribe the cores.
			for _, v := range []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"} {
				if _, set := os.LookupEnv(v); !set {
					cmd.Env = append(cmd.Env, v+"=1")
				}
			}
		}
		cmd.Env = append(cmd.Env, cfg.Env...)
		// Own process group (unix): a terminal's Ctrl-C reaches only the launcher, which
		// forwards it; death with the launcher (Linux).
		ownProcessGroup(cmd)
		if fd, ok := inheritPipe(cmd, pipeR); ok {
			cmd.Env = append(cmd.Env, launchenv.PipeEnv+"="+fd+","+strconv.Itoa(os.Getpid()))
		}
		errFile := filepath.Join(errDir, fmt.Sprintf("rank%d.json", rank))
		cmd.Env = append(cmd.Env, launchenv.ErrorFileEnv+"="+errFile)
		prefix := fmt.Sprintf("[rank%d]: ", rank)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stopAll(syscall.SIGKILL)
			for _, w := range ws[:lr] {
				<-w.done
			}
			return nil, fmt.Errorf("launch: starting rank %d: %w", rank, err)
		}
		w := &worker{cmd: cmd, rank: rank, localRank: lr, done: make(chan struct{}), errFile: errFile}
		ws[lr] = w
		pipes := new(sync.WaitGroup)
		pipes.Add(2)
		conOut, conErr, fileOut, fileErr, closeLogs, err := cfg.workerLogs(lr, restart)
		if err != nil {
			stopAll(syscall.SIGKILL)
			for _, w := range ws[:lr] {
				<-w.done
			}
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
		go copyLines(pipes, &outMu, conOut, fileOut, stdout, prefix, nil)
		go copyLines(pipes, &outMu, conErr, fileErr, stderr, prefix, &w.stderr)
		go func() {
			pipes.Wait() // reading all output before Wait, as os/exec requires for pipes
			closeLogs()
			w.err = cmd.Wait()
			close(w.done)
			exited <- w
		}()
	}

	var first *worker      // the first worker seen to fail on its own
	var failedWs []*worker // every worker that exited non-zero
	var result error
	stopping := false
	var killTimer <-chan time.Time
	ctxDone := ctx.Done()
	stopWorkers := func(sig syscall.Signal) {
		if !stopping {
			stopping = true
			killTimer = time.After(cfg.StopGrace)
		}
		stopAll(sig)
	}
	for remaining := n; remaining > 0; {
		select {
		case <-stop:
			stop = nil
			if result == nil && first == nil {
				result = errRoundChanged
			}
			stopWorkers(syscall.SIGTERM)
		case w := <-exited:
			remaining--
			if w.err != nil {
				failedWs = append(failedWs, w)
			}
			if w.err != nil && first == nil && !stopping {
				first = w
				stopWorkers(syscall.SIGTERM)
			}
		case sig := <-cfg.Signals:
			result = fmt.Errorf("%w %v", ErrInterrupted, sig)
			if s, ok := sig.(syscall.Signal); ok {
				stopWorkers(s)
			} else {
				stopWorkers(syscall.SIGTERM)
			}
		case <-ctxDone:
			ctxDone = nil
			if result == nil {
				result = fmt.Errorf("launch: %w", ctx.Err())
			}
			stopWorkers(syscall.SIGTERM)
		case <-killTimer:
			stopAll(syscall.SIGKILL)
		}
	}
	if result != nil {
		return nil, result
	}
	if first == nil {
		return nil, nil
	}
	return rootCause(first, failedWs).workerError(), nil
}

// copyLines copies r to w line by line, each whole line prefixed once, and to file (when
// set) as it is. Only a newline ends a line: a line a worker redrew with carriage returns
// (a progress bar) reaches w as what a terminal would show of it, the text after its last
// "\r" (a "\r\n" line end counts as "\n"), so that a log holds one prefixed line per line
// and no redraws. A line longer than 64 KiB goes out in pieces as it arrives. When last is
// set it keeps the last lines (see tail). w may be nil (redirected).
func copyLines(wg *sync.WaitGroup, mu *sync.Mutex, w, file io.Writer, r io.Reader, prefix string, last *tail) {
	defer wg.Done()
	br := bufio.NewReaderSize(r, 64<<10)
	var seg []byte
	for {
		b, err := br.ReadByte()
		if err == nil {
			seg = append(seg, b)
		}
		end := err == nil && b == '\n'
		if end || err != nil && len(seg) > 0 || err == nil && br.Buffered() == 0 && len(seg) >= 64<<10 {
			if !end {
				seg = append(seg, '\n')
			}
			if file != nil {
				file.Write(seg)
			}
			line := lastRedraw(seg)
			if w != nil {
				mu.Lock()
				io.WriteString(w, prefix)
				w.Write(line)
				mu.Unlock()
			}
			if last != nil {
				last.add(line)
			}
			seg = seg[:0]
		}
		if err != nil {
			return
		}
	}
}

// lastRedraw is what a terminal shows of seg: the text after its last carriage return
// (before the line's end), ending in a newline.
func lastRedraw(seg []byte) []byte {
	body := bytes.TrimSuffix(bytes.TrimSuffix(seg, []byte("\n")), []byte("\r"))
	for len(body) > 0 && body[len(body)-1] == '\r' {
		body = body[:len(body)-1]
	}
	if i := bytes.LastIndexByte(body, '\r'); i >= 0 {
		body = body[i+1:]
	}
	return append(body[:len(body):len(body)], '\n')
}
