package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// failWorker is the worker of TestGprunLoneFailure ("early": rank 1 exits 1 at once, rank 0
// blocks) and of TestGprunAbortMidAllReduce ("abort": rank 1 fails while rank 0 is in an
// all-reduce, as the trainer on a bad JPEG, and aborts its group with the error).
func failWorker(mode string) int {
	rank := os.Getenv("RANK")
	switch mode {
	case "early":
		if rank == "1" {
			fmt.Fprintln(os.Stderr, "worker error: trainer: decode /data/x.jpg: unexpected EOF")
			return 1
		}
		time.Sleep(30 * time.Second) // until gprun stops it
		return 0
	case "ignoreterm": // TestGprunTermTimeout: rank 0 ignores SIGTERM, rank 1 fails
		if rank == "1" {
			time.Sleep(time.Second) // rank 0 ignores SIGTERM by then
			fmt.Printf("failing at %d\n", time.Now().UnixNano())
			return 1
		}
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(30 * time.Second) // until gprun kills it
		return 0
	case "abort":
		ctx := context.Background()
		g, err := comm.InitFromEnv(ctx, comm.WithTimeout(60*time.Second), comm.WithConnectTimeout(20*time.Second))
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker error:", err)
			return 1
		}
		if rank == "1" {
			time.Sleep(300 * time.Millisecond)
			fmt.Printf("failing at %d\n", time.Now().UnixNano())
			err := errors.New("trainer: decode /data/x.jpg: unexpected EOF")
			comm.Abort(ctx, g, err)
			fmt.Fprintln(os.Stderr, "worker error:", err)
			return 1
		}
		defer g.Close(ctx)
		if err := g.AllReduce(comm.F32(make([]float32, 1<<20)), comm.Sum).Wait(ctx); err != nil {
			comm.Abort(ctx, g, err)
			fmt.Fprintln(os.Stderr, "worker error:", err)
			return 1
		}
		return 0
	}
	return 2
}

// One worker exits 1 early while the other blocks: the job ends within 10 s, the failure
// (rank, status, its stderr) is printed once per attempt, and gprun exits non-zero; with
// --max-restarts 1 the workers run twice.
func TestGprunLoneFailure(t *testing.T) {
	t.Setenv("GPRUN_TEST_FAIL", "early")
	for _, restarts := range []int{0, 1} {
		t.Run(fmt.Sprint("restarts", restarts), func(t *testing.T) {
			var out bytes.Buffer
			start := time.Now()
			code := run(context.Background(), []string{"--nproc-per-node", "2", "--max-restarts", fmt.Sprint(restarts), "--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
			took := time.Since(start)
			s := out.String()
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if took > 10*time.Second {
				t.Errorf("the job took %v", took)
			}
			if n := strings.Count(s, "gprun: rank 1 (local rank 1) failed: exit status 1"); n != restarts+1 {
				t.Errorf("%d failure reports, want %d (one per attempt)", n, restarts+1)
			}
			if n := strings.Count(s, "    [rank1]: worker error: trainer: decode /data/x.jpg: unexpected EOF"); n != restarts+1 {
				t.Errorf("%d copies of the cause in the reports, want %d", n, restarts+1)
			}
			if n := strings.Count(s, "restarting the workers"); n != restarts {
				t.Errorf("%d restarts, want %d", n, restarts)
			}
			if t.Failed() {
				t.Logf("output:\n%s", s)
			}
			t.Logf("gprun exited %d after %v", code, took.Round(time.Millisecond))
		})
	}
}

// The reported hang: rank 1 fails alone while rank 0 waits in an all-reduce. The whole job
// ends within 10 s (instead of rank 0's 60 s timeout here, 30 min by default) and the
// output names rank 1's reason.
func TestGprunAbortMidAllReduce(t *testing.T) {
	t.Setenv("GPRUN_TEST_FAIL", "abort")
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			t.Setenv("GP_COMM_TRANSPORT", tr)
			var out bytes.Buffer
			start := time.Now()
			code := run(context.Background(), []string{"--nproc-per-node", "2", "--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
			end := time.Now()
			took := end.Sub(start)
			s := out.String()
			var failedAt int64
			if i := strings.Index(s, "[rank1]: failing at "); i >= 0 {
				fmt.Sscanf(s[i:], "[rank1]: failing at %d", &failedAt)
			}
			// Both ranks fail; the report names the root cause, rank 1, and its reason (which
			// rank 1 recorded through comm.Abort), whichever rank exited first. Its status is
			// its exit, or the SIGTERM that stopped it when rank 0 exited first.
			report := regexp.MustCompile(`gprun: rank 1 \(local rank 1\) failed: (exit status 1|signal: terminated) \(after 0 restarts\): trainer: decode /data/x.jpg: unexpected EOF`)
			if code != 1 || took > 10*time.Second || strings.Count(s, "gprun: rank") != 1 || !report.MatchString(s) {
				t.Errorf("exit %d after %v, want 1 within 10 s and one report matching %s; output:\n%s", code, took, report, s)
			}
			t.Logf("gprun exited %d %v after rank 1 failed (job %v):\n%s", code, end.Sub(time.Unix(0, failedAt)).Round(time.Microsecond), took.Round(time.Millisecond), s)
		})
	}
}
