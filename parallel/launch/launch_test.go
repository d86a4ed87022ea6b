package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// The test binary is also the worker: GP_LAUNCH_TEST_WORKER selects what it does.
func TestMain(m *testing.M) {
	if sc := os.Getenv("GP_LAUNCH_TEST_WORKER"); sc != "" {
		os.Exit(testWorker(sc))
	}
	if os.Getenv("GP_LAUNCH_TEST_LAUNCHER") != "" && testLauncher != nil {
		os.Exit(testLauncher())
	}
	os.Exit(m.Run())
}

// testLauncher, where set (orphan_linux_test.go), is the test binary as a launcher.
var testLauncher func() int

func testWorker(scenario string) int {
	env := func(k string) string { return os.Getenv(k) }
	switch scenario {
	case "env":
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
			"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
			"TORCHELASTIC_RUN_ID", "GP_RDZV_SECRET"} {
			if env(k) == "" {
				fmt.Println("missing", k)
				return 2
			}
		}
		fmt.Printf("hello %s/%s\n", env("RANK"), env("WORLD_SIZE"))
		fmt.Fprint(os.Stderr, "no newline")
		return 0
	case "flaky":
		// Rank 1 fails on the first two attempts.
		if env("RANK") == "1" && env("TORCHELASTIC_RESTART_COUNT") != "2" {
			return 3
		}
		fmt.Println("attempt", env("TORCHELASTIC_RESTART_COUNT"))
		return 0
	case "fail":
		if env("RANK") == "1" {
			return 7
		}
		time.Sleep(time.Minute) // stopped by the launcher
		return 0
	case "failfast":
		// Rank 1 fails at once, saying why on stderr; rank 0 blocks and ignores SIGTERM,
		// so only the SIGKILL after the grace period ends it. Rank 1 fails once rank 0 has
		// made READY, after it ignores SIGTERM.
		ready := env("READY") + "/" + env("TORCHELASTIC_RESTART_COUNT")
		if env("RANK") == "1" {
			for i := 0; i < 500; i++ {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Fprintln(os.Stderr, "loading shard 3")
			fmt.Fprintln(os.Stderr, "worker error: trainer: decode /data/x.jpg: unexpected EOF")
			return 1
		}
		signal.Ignore(syscall.SIGTERM)
		os.WriteFile(ready, nil, 0o600)
		time.Sleep(30 * time.Second)
		return 0
	case "orphan":
		// Blocks until its launcher dies (then the kernel or the launcher pipe ends it).
		if env("WATCH") != "" && !launchenv.WatchLauncher() {
			fmt.Println("no launcher pipe")
			return 1
		}
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(30 * time.Second)
		return 0
	case "signal":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGINT)
		fmt.Println("ready")
		select {
		case s := <-c:
			fmt.Println("got", s)
			return 0
		case <-time.After(time.Minute):
			return 1
		}
	case "comm":
		ctx := context.Background()
		g, err := comm.InitFromEnv(ctx, comm.WithTimeout(20*time.Second))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer g.Close(ctx)
		b := comm.F32{float32(g.Rank() + 1)}
		if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("sum", b[0])
		return 0
	}
	return 1
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func run(t *testing.T, scenario string, n, restarts int, sigs <-chan os.Signal) (string, error) {
	t.Helper()
	var out syncBuf
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := Run(ctx, Config{NProcPerNode: n, MaxRestarts: restarts, Program: os.Args[0],
		Args: []string{"-test.run=^$"}, Env: []string{"GP_LAUNCH_TEST_WORKER=" + scenario},
		Stdout: &out, Stderr: &out, StopGrace: 2 * time.Second, Signals: sigs})
	return out.String(), err
}

func TestLaunch(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		n        int
		restarts int
		want     []string
		wantErr  string
	}{
		{"env", 3, 0, []string{"[rank0]: hello 0/3\n", "[rank2]: hello 2/3\n", "[rank1]: no newline\n"}, ""},
		{"flaky", 2, 2, []string{"[rank0]: attempt 2", "[rank1]: attempt 2", "restarting the workers (2/2)"}, ""},
		{"fail", 2, 1, []string{"restarting the workers (1/1)"}, "rank 1 (local rank 1) failed: exit status 7 (after 1 restarts)"},
		{"comm", 3, 0, []string{"[rank0]: sum 6\n", "[rank2]: sum 6\n"}, ""},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			start := time.Now()
			out, err := run(t, tc.scenario, tc.n, tc.restarts, nil)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q\n%s", err, tc.wantErr, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v: failed workers' peers were not stopped", d)
			}
			var we *WorkerError
			if tc.wantErr != "" && (!errors.As(err, &we) || we.ExitCode != 7) {
				t.Errorf("not a WorkerError with exit code 7: %#v", err)
			}
		})
	}
}

func TestSignalForwarded(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("windows cannot send SIGINT to another process: the launcher kills its workers instead")
	}
	sigs := make(chan os.Signal, 1)
	var buf syncBuf
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		done <- Run(ctx, Config{NProcPerNode: 2, MaxRestarts: 3, Program: os.Args[0],
			Args: []string{"-test.run=^$"}, Env: []string{"GP_LAUNCH_TEST_WORKER=signal"},
			Stdout: &buf, Stderr: &buf, StopGrace: 2 * time.Second, Signals: sigs})
	}()
	// Signal only once both workers have installed their handler (a fixed delay flakes
	// under load: a worker not yet listening dies of the signal instead).
	for !strings.Contains(buf.String(), "[rank0]: ready") || !strings.Contains(buf.String(), "[rank1]: ready") {
		select {
		case err := <-done:
			t.Fatalf("launcher returned before the workers were ready: %v\n%s", err, buf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	sigs <- syscall.SIGINT
	err := <-done
	out := buf.String()
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v\n%s", err, out)
	}
	if !strings.Contains(out, "[rank0]: got interrupt") || !strings.Contains(out, "[rank1]: got interrupt") {
		t.Errorf("workers did not get SIGINT:\n%s", out)
	}
}

// One worker exits 1 at once while the other blocks, even ignoring SIGTERM: the job ends
// within 10 s with that worker's failure (rank, status, last stderr lines), reported once
// per attempt; with one restart allowed it runs twice.
func TestFailFast(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("signal.Ignore(SIGTERM) means nothing there: workers are killed at once")
	}
	for _, restarts := range []int{0, 1} {
		t.Run(fmt.Sprint("restarts", restarts), func(t *testing.T) {
			var out syncBuf
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			err := Run(ctx, Config{NProcPerNode: 2, MaxRestarts: restarts, Program: os.Args[0],
				Args: []string{"-test.run=^$"}, Env: []string{"GP_LAUNCH_TEST_WORKER=failfast", "READY=" + t.TempDir()},
				Stdout: &out, Stderr: &out, StopGrace: 500 * time.Millisecond})
			took := time.Since(start)
			var we *WorkerError
			if !errors.As(err, &we) || we.Rank != 1 || we.ExitCode != 1 || we.Restarts != restarts {
				t.Fatalf("err = %#v, want rank 1's exit 1 after %d restarts\n%s", err, restarts, out.String())
			}
			if want := []string{"loading shard 3", "worker error: trainer: decode /data/x.jpg: unexpected EOF"}; !slices.Equal(we.Stderr, want) {
				t.Errorf("stderr tail %q, want %q", we.Stderr, want)
			}
			if r := we.Report(); !strings.Contains(r, "exit status 1") || !strings.Contains(r, "[rank1]: worker error: trainer: decode") {
				t.Errorf("report lacks the status or the cause:\n%s", r)
			}
			if n := strings.Count(out.String(), "rank 1 (local rank 1) failed"); n != restarts {
				t.Errorf("the launcher printed %d failure reports, want %d (one per restart; the last is the caller's)\n%s", n, restarts, out.String())
			}
			if n := strings.Count(out.String(), "restarting the workers"); n != restarts {
				t.Errorf("%d restarts, want %d\n%s", n, restarts, out.String())
			}
			if took < time.Duration(restarts+1)*500*time.Millisecond || took > 10*time.Second {
				t.Errorf("the job took %v", took)
			}
			t.Logf("job ended %v after start (%d attempts, each ended by the SIGKILL 0.5 s after the SIGTERM):\n%s", took.Round(time.Millisecond), restarts+1, we.Report())
		})
	}
}
