package comm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
)

// The test binary doubles as the worker of the multi-process tests: with GP_COMM_TEST_WORKER
// set it runs that scenario as one rank (configured by the torchrun variables) and exits.
func TestMain(m *testing.M) { proctest.Main(m, "GP_COMM_TEST_WORKER", worker) }

func worker(scenario string) error {
	ctx := context.Background()
	opts := []Option{WithConnectTimeout(20 * time.Second), WithChunkBytes(16 << 10), WithSmallBytes(4096)}
	if scenario != "stall" { // which takes its timeouts from GP_COMM_TIMEOUT and GP_COMM_WARN_AFTER
		opts = append(opts, WithTimeout(20*time.Second))
	}
	if scenario == "secret" {
		opts = append(opts, WithConnectTimeout(2*time.Second))
	}
	g, err := InitFromEnv(ctx, opts...)
	if scenario == "secret" {
		if os.Getenv("RANK") == "1" && !errors.Is(err, auth.ErrFailed) {
			return fmt.Errorf("want auth.ErrFailed, got %v", err)
		}
		if os.Getenv("RANK") == "0" && (err == nil || !strings.Contains(err.Error(), "ranks [1] did not connect")) {
			return fmt.Errorf("rank 0: want 'ranks [1] did not connect', got %v", err)
		}
		fmt.Println("refused:", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	n, r := g.Size(), g.Rank()
	switch scenario {
	case "check":
		h := fnv.New64a()
		for _, count := range testSizes(n) {
			for _, op := range []Op{Sum, Max} {
				ins := make([][]float32, n)
				for i := range ins {
					ins[i] = input(i, count, true)
				}
				want := reference(op, ins)
				ar := slices.Clone(ins[r])
				lo, hi := ShardRange(count, n, r)
				rs := make([]float32, hi-lo)
				ag := make([]float32, count)
				rnd := input(r, count, false)
				ws := []Work{g.AllReduce(F32(ar), op), g.ReduceScatter(F32(rs), F32(ins[r]), op),
					g.AllGather(F32(ag), F32(ins[r][lo:hi])), g.AllReduce(F32(rnd), Sum)}
				for _, w := range ws {
					if err := w.Wait(ctx); err != nil {
						return err
					}
				}
				for i := range ar {
					if float64(ar[i]) != want[i] || ag[i] != ins[ShardOf(count, n, i)][i] {
						return fmt.Errorf("count %d %v: element %d wrong", count, op, i)
					}
				}
				for i := range rs {
					if float64(rs[i]) != want[lo+i] {
						return fmt.Errorf("count %d %v: reduce-scatter element %d wrong", count, op, i)
					}
				}
				for _, v := range rnd {
					fmt.Fprint(h, math.Float32bits(v))
				}
			}
		}
		fmt.Printf("checksum %x\n", h.Sum64())
	case "kill":
		victim := n - 1
		shm := os.Getenv("GP_COMM_TRANSPORT") == "shm"
		if r == victim && shm {
			// Shared memory finishes 32 MB within the 30 ms below: join late, so that the
			// survivors are asleep mid-all-reduce waiting for the victim when it dies.
			time.Sleep(50 * time.Millisecond)
		}
		w := g.AllReduce(F32(make([]float32, 8<<20)), Sum)
		if r == victim {
			if shm {
				time.Sleep(time.Millisecond)
			} else {
				time.Sleep(30 * time.Millisecond)
			}
			proctest.KillSelf()
		}
		start := time.Now()
		err := w.Wait(ctx)
		if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), fmt.Sprintf("peer rank %d gone", victim)) {
			return fmt.Errorf("want ErrPeerGone naming rank %d, got %v", victim, err)
		}
		fmt.Printf("survivor saw after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	case "abort", "leave":
		// Rank 1 fails alone (as the trainer on a bad JPEG) while rank 0 is blocked in an
		// all-reduce: with "abort" it aborts the group with its error, with "leave" it only
		// closes it. Rank 0's all-reduce must fail at once naming rank 1 (and its reason).
		if r == 1 {
			time.Sleep(200 * time.Millisecond)
			reason := errors.New("trainer: decode /data/x.jpg: unexpected EOF")
			fmt.Fprintf(os.Stderr, "failing at %d\n", time.Now().UnixNano())
			if scenario == "abort" {
				Abort(ctx, g, reason)
			} else {
				g.Close(ctx)
			}
			return reason
		}
		err := g.AllReduce(F32(make([]float32, 1<<20)), Sum).Wait(ctx)
		want, sentinel := "comm: rank 1 aborted: trainer: decode /data/x.jpg: unexpected EOF", ErrAborted
		if scenario == "leave" {
			want, sentinel = "peer rank 1 gone", ErrPeerGone
		}
		if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("want %q, got %v", want, err)
		}
		fmt.Printf("failed at %d: %v\n", time.Now().UnixNano(), err)
	case "stall":
		return stallWorker(ctx, g)
	case "mismatch":
		c := 1000
		if r == 1 {
			c = 1001
		}
		err := g.AllReduce(F32(make([]float32, c)), Sum).Wait(ctx)
		if !errors.Is(err, ErrMismatch) {
			return fmt.Errorf("want ErrMismatch, got %v", err)
		}
		fmt.Println("mismatch:", err)
	}
	return nil
}

// ShardOf returns the rank whose shard holds element i (test helper).
func ShardOf(total, n, i int) int {
	for r := range n {
		if lo, hi := ShardRange(total, n, r); i >= lo && i < hi {
			return r
		}
	}
	return -1
}

// spawn runs n worker processes of scenario and returns their outputs and errors.
func spawn(t *testing.T, n int, scenario string, env func(rank int) []string) ([]string, []error) {
	t.Helper()
	job := proctest.Spawn(t, n, "GP_COMM_TEST_WORKER", scenario, func(r int) []string {
		e := []string{"GP_RDZV_SECRET=test-secret"}
		if env != nil {
			e = append(e, env(r)...)
		}
		return e
	})
	// No shared-memory file may outlive the job, whatever happened to it (files are named
	// after the pid of the rank that created them).
	for r, pid := range job.Pids {
		left, _ := filepath.Glob(fmt.Sprintf("%s/%s%d-*", shmDir, shmFilePrefix, pid))
		if len(left) > 0 {
			t.Errorf("rank %d left %v behind", r, left)
		}
	}
	return job.Outputs, job.Errs
}

// transports are the values of GP_COMM_TRANSPORT the process tests run under.
var transports = []string{"tcp", "shm"}

func TestProcessesCollectives(t *testing.T) {
	for _, tr := range transports {
		for _, n := range []int{1, 2, 3, 5} {
			t.Run(fmt.Sprint(tr, n), func(t *testing.T) { checkProcesses(t, tr, n) })
		}
	}
}

func transportEnv(tr string) func(int) []string {
	return func(int) []string { return []string{"GP_COMM_TRANSPORT=" + tr} }
}

func checkProcesses(t *testing.T, tr string, n int) {
	var sums []string
	for range 2 {
		outs, errs := spawn(t, n, "check", transportEnv(tr))
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("rank %d: %v\n%s", r, errs[r], outs[r])
			}
		}
		sums = append(sums, outs...)
	}
	for _, s := range sums {
		if s != sums[0] || !strings.HasPrefix(s, "checksum") {
			t.Fatalf("results not bit-identical across ranks and runs: %q", sums)
		}
	}
}

func TestProcessesFailures(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { checkProcessFailures(t, tr) })
	}
}

func checkProcessFailures(t *testing.T, tr string) {
	t.Run("kill", func(t *testing.T) {
		outs, errs := spawn(t, 3, "kill", transportEnv(tr))
		for r := range 2 {
			if errs[r] != nil {
				t.Errorf("survivor %d: %v\n%s", r, errs[r], outs[r])
			}
		}
		if errs[2] == nil {
			t.Errorf("victim exited cleanly")
		}
		t.Log(outs[0])
	})
	for _, sc := range []string{"abort", "leave"} {
		t.Run(sc, func(t *testing.T) { checkLoneFailure(t, tr, sc) })
	}
	t.Run("mismatch", func(t *testing.T) {
		outs, errs := spawn(t, 2, "mismatch", transportEnv(tr))
		for r := range 2 {
			if errs[r] != nil {
				t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
			}
		}
	})
	t.Run("secret", func(t *testing.T) {
		outs, errs := spawn(t, 2, "secret", func(r int) []string {
			if r == 1 {
				return []string{"GP_RDZV_SECRET=stranger", "GP_COMM_TRANSPORT=" + tr}
			}
			return []string{"GP_COMM_TRANSPORT=" + tr}
		})
		for r := range 2 {
			if errs[r] != nil {
				t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
			}
		}
		if !strings.Contains(outs[0], "refused") {
			t.Errorf("rank 0 did not log the refusal: %s", outs[0])
		}
	})
}

// checkLoneFailure runs scenario "abort" or "leave": rank 1 fails alone while rank 0 waits in
// an all-reduce; rank 0 must fail within 10 s naming rank 1 and both processes must exit.
func checkLoneFailure(t *testing.T, tr, scenario string) {
	start := time.Now()
	outs, errs := spawn(t, 2, scenario, transportEnv(tr))
	took := time.Since(start)
	if errs[0] != nil {
		t.Errorf("rank 0: %v\n%s", errs[0], outs[0])
	}
	if errs[1] == nil {
		t.Errorf("rank 1 exited cleanly:\n%s", outs[1])
	}
	var failed, saw int64
	fmt.Sscanf(outs[1][strings.Index(outs[1], "failing at"):], "failing at %d", &failed)
	if i := strings.Index(outs[0], "failed at"); i >= 0 {
		fmt.Sscanf(outs[0][i:], "failed at %d", &saw)
	}
	lag := time.Duration(saw - failed)
	if saw == 0 || lag > 10*time.Second || took > 20*time.Second {
		t.Errorf("rank 0 failed %v after rank 1 did; the job took %v\n%s\n%s", lag, took, outs[0], outs[1])
	}
	t.Logf("rank 0 failed %v after rank 1; job %v: %s", lag.Round(time.Microsecond), took.Round(time.Millisecond), strings.TrimSpace(outs[0]))
}
