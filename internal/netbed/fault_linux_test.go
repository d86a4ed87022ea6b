package netbed_test

// Faults across the test bed: a host that becomes unreachable in
// the middle of a job, a link that drops packets, a rank that starts late. Each job is a few
// ranks of this test binary started inside the bed's hosts (GP_NETBED_FAULT_WORKER), and each
// must end as on one host: with the comm package's errors naming the peer, within the
// configured GP_COMM_TIMEOUT or GP_RDZV_TIMEOUT plus a margin, with no process, namespace or
// shared-memory file left behind.
//
// The kernel these tests were written on has no netem, so loss is made with nftables
// (numgen random ... drop) when nft is installed; the loss test skips without it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/netbed"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

const faultWorkerEnv = "GP_NETBED_FAULT_WORKER"

func TestMain(m *testing.M) { proctest.Main(m, faultWorkerEnv, faultWorker) }

// faultWorker is one rank: it joins the group (timeouts from GP_COMM_TIMEOUT and
// GP_RDZV_TIMEOUT), then runs all-reduces of 1 MiB, checking every sum, for GP_FAULT_STEPS
// steps (0: until one fails), printing "step N" after each of the first 3 and "done" at the
// end. A failure prints "FAILED <unix ns> <error>" and then the time Close took, which waits
// for the peers' leave notices up to GP_FAULT_CLOSE_TIMEOUT (comm.WithCloseTimeout, default
// 10 s; after a failure comm waits at most 1 s of it).
func faultWorker(string) error {
	ctx := context.Background()
	start := time.Now()
	var opts []comm.Option
	if d, err := time.ParseDuration(os.Getenv("GP_FAULT_CLOSE_TIMEOUT")); err == nil {
		opts = append(opts, comm.WithCloseTimeout(d))
	}
	g, err := comm.InitFromEnv(ctx, opts...)
	if err != nil {
		fmt.Printf("FAILED %d %v\n", time.Now().UnixNano(), err)
		fmt.Printf("init took %v\n", time.Since(start).Round(time.Millisecond))
		return nil
	}
	steps, _ := strconv.Atoi(os.Getenv("GP_FAULT_STEPS"))
	n, r := g.Size(), g.Rank()
	buf := make([]float32, 1<<18)
	for s := 0; steps == 0 || s < steps; s++ {
		for i := range buf {
			buf[i] = float32(r+1) * float32(i%7+s%5)
		}
		if err := g.AllReduce(comm.F32(buf), comm.Sum).Wait(ctx); err != nil {
			fmt.Printf("FAILED %d %v\n", time.Now().UnixNano(), err)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cs := time.Now()
			g.Close(cctx)
			fmt.Printf("close took %v\n", time.Since(cs).Round(time.Millisecond))
			return nil
		}
		tri := float32(n * (n + 1) / 2)
		for i, v := range buf {
			if v != tri*float32(i%7+s%5) {
				return fmt.Errorf("step %d: element %d = %v, want %v", s, i, v, tri*float32(i%7+s%5))
			}
		}
		if s < 3 {
			fmt.Printf("step %d\n", s)
		}
	}
	fmt.Println("done")
	return g.Close(ctx)
}

// job is a set of ranks running faultWorker inside a bed.
type job struct {
	bed   *netbed.Bed
	local int
	cmds  []*exec.Cmd
	outs  []*syncBuffer
	pids  []int
	done  []chan error
}

// startJob starts ranks hosts×local (rank r on host r/local), except those in later, which
// the caller starts with startRank.
func startJob(t *testing.T, ctx context.Context, bed *netbed.Bed, local int, env []string, later ...int) *job {
	t.Helper()
	world := bed.Hosts() * local
	j := &job{bed: bed, local: local, cmds: make([]*exec.Cmd, world), outs: make([]*syncBuffer, world),
		pids: make([]int, world), done: make([]chan error, world)}
	port := 29400 + int(time.Now().UnixNano()%500)
	for r := range world {
		cmd := bed.Command(ctx, r/local, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), faultWorkerEnv+"=1", "GP_RDZV_SECRET=netbed-fault",
			"TORCHELASTIC_RUN_ID=netbed-fault", "OPENBLAS_NUM_THREADS=1")
		cmd.Env = append(cmd.Env, bed.RankEnv(r, local, port)...)
		cmd.Env = append(cmd.Env, env...)
		j.outs[r] = &syncBuffer{}
		cmd.Stdout, cmd.Stderr = j.outs[r], j.outs[r]
		j.cmds[r] = cmd
		j.done[r] = make(chan error, 1)
	}
	t.Cleanup(j.check(t))
	for r := range world {
		if !contains(later, r) {
			j.startRank(t, r)
		}
	}
	return j
}

func (j *job) startRank(t *testing.T, r int) {
	t.Helper()
	if err := j.cmds[r].Start(); err != nil {
		t.Fatal(err)
	}
	j.pids[r] = j.cmds[r].Process.Pid
	go func() { j.done[r] <- j.cmds[r].Wait() }()
}

// waitOut waits until rank r has printed s; it fails the test after d.
func (j *job) waitOut(t *testing.T, r int, s string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(j.outs[r].String(), s); {
		if time.Now().After(deadline) {
			t.Fatalf("rank %d did not print %q within %v:\n%s", r, s, d, j.outs[r])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits for every started rank to exit, for at most d in all, and returns their
// outputs; a rank still running after d fails the test (a hang).
func (j *job) wait(t *testing.T, d time.Duration) []string {
	t.Helper()
	deadline := time.After(d)
	outs := make([]string, len(j.cmds))
	for r := range j.cmds {
		if j.pids[r] == 0 {
			continue
		}
		select {
		case err := <-j.done[r]:
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		case <-deadline:
			t.Fatalf("rank %d still running %v after the fault (a hang):\n%s", r, d, j.outs[r])
		}
		outs[r] = j.outs[r].String()
	}
	return outs
}

// check, run at the test's end, wants no shared-memory file of the job's ranks left.
func (j *job) check(t *testing.T) func() {
	return func() {
		for r, pid := range j.pids {
			if pid == 0 {
				continue
			}
			if left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/gp-comm-%d-*", pid)); len(left) > 0 {
				t.Errorf("rank %d left %v behind", r, left)
			}
		}
	}
}

var failedRE = regexp.MustCompile(`(?m)^FAILED (\d+) (.*)$`)

// failure parses a worker's "FAILED" line: when and what.
func failure(out string) (time.Time, string, bool) {
	m := failedRE.FindStringSubmatch(out)
	if m == nil {
		return time.Time{}, "", false
	}
	ns, _ := strconv.ParseInt(m[1], 10, 64)
	return time.Unix(0, ns), m[2], true
}

// A host that becomes unreachable while the job runs all-reduces, three ways: its link to
// the switch set down, its veth deleted, or every packet to and from it dropped (nftables).
// No connection is closed (no FIN, no RST), so nothing but the timeout can end the
// collective: every rank must fail with comm's *TimeoutError within GP_COMM_TIMEOUT plus a
// margin, the report naming a rank of the other side; none may hang. Each cut runs with 2
// hosts of 2 ranks (hierarchical collectives); the link going down also with 1 rank per host.
func TestHostUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	// comm's default close timeout (10 s) applies: after the timeout fails the group, Close
	// must not wait it out for peers that are unreachable, so every rank exits within
	// timeout+margin (it took timeout+10 s before comm bounded the wait after an abort).
	const timeout, margin = 2 * time.Second, 7 * time.Second
	cuts := []struct {
		name string
		cut  func(ctx context.Context, b *netbed.Bed) error
	}{
		{"link-down", func(ctx context.Context, b *netbed.Bed) error { return b.SetLink(ctx, 1, false) }},
		{"veth-deleted", func(ctx context.Context, b *netbed.Bed) error { return b.DeleteLink(ctx, 1) }},
		{"all-dropped", func(ctx context.Context, b *netbed.Bed) error { return b.Loss(ctx, 1, 1) }},
	}
	for _, local := range []int{1, 2} {
		for _, c := range cuts {
			if local == 1 && c.name != "link-down" {
				continue // flat TCP fails the same way whatever the cut; one kind is enough
			}
			t.Run(fmt.Sprintf("%s/2x%d", c.name, local), func(t *testing.T) {
				bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit"})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				j := startJob(t, ctx, bed, local, []string{"GP_COMM_TIMEOUT=" + timeout.String(), "GP_RDZV_TIMEOUT=20s"})
				for r := range 2 * local {
					j.waitOut(t, r, "step 2", 20*time.Second)
				}
				cutAt := time.Now()
				if err := c.cut(ctx, bed); errors.Is(err, netbed.ErrUnavailable) {
					t.Skip(err)
				} else if err != nil {
					t.Fatal(err)
				}
				outs := j.wait(t, timeout+margin)
				for r, out := range outs {
					at, msg, ok := failure(out)
					if !ok {
						t.Errorf("rank %d did not fail:\n%s", r, out)
						continue
					}
					// Ranks on host 0 must name a rank of host 1, and the other way round;
					// a rank that heard of the failure from its host's leader names the
					// leader's report, which names it.
					other := 1 - r/local
					if !strings.Contains(msg, "comm: timeout") || !namesHost(msg, other, local) {
						t.Errorf("rank %d: want comm's timeout naming a rank of host %d, got %s", r, other, msg)
					}
					if took := at.Sub(cutAt); took > timeout+margin {
						t.Errorf("rank %d failed %v after the cut, timeout %v", r, took, timeout)
					}
					t.Logf("rank %d failed %v after the cut (%s): %s", r, at.Sub(cutAt).Round(time.Millisecond), closeTook(out), msg)
				}
			})
		}
	}
}

// namesHost reports whether msg names a rank of host h (ranks h*local to h*local+local-1).
func namesHost(msg string, h, local int) bool {
	for r := h * local; r < (h+1)*local; r++ {
		if regexp.MustCompile(fmt.Sprintf(`rank %d\b`, r)).MatchString(msg) {
			return true
		}
	}
	return false
}

// A link that drops 5% of the packets both ways: TCP retransmits, and the job completes
// with every sum right (each worker checks them) within the timeout; the drop counter shows
// that packets were lost.
func TestLossyLink(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.Loss(ctx, 1, 0.05); errors.Is(err, netbed.ErrUnavailable) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	j := startJob(t, ctx, bed, 1, []string{"GP_COMM_TIMEOUT=20s", "GP_RDZV_TIMEOUT=20s", "GP_FAULT_STEPS=20"})
	outs := j.wait(t, 50*time.Second)
	for r, out := range outs {
		if !strings.Contains(out, "done") {
			t.Errorf("rank %d did not complete:\n%s", r, out)
		}
	}
	dropped, err := bed.Dropped(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if dropped == 0 {
		t.Errorf("no packet dropped: the loss rule did not act")
	}
	t.Logf("%d packets dropped; every sum right on both ranks", dropped)
}

// Rank 1 (host 1) starts late: within GP_RDZV_TIMEOUT the job runs; past it, rank 0 fails
// at the rendezvous timeout naming rank 1 as missing, and rank 1, starting after rank 0
// left, fails within its own rendezvous timeout naming the store it could not reach.
func TestLateRank(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const rdzv, margin = 3 * time.Second, 8 * time.Second
	for _, tc := range []struct {
		name string
		late time.Duration
	}{{"within", time.Second}, {"past", rdzv + 2*time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			bed := netbed.New(t, 2, netbed.Link{Rate: "1gbit"})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			j := startJob(t, ctx, bed, 1, []string{"GP_COMM_TIMEOUT=5s", "GP_RDZV_TIMEOUT=" + rdzv.String(), "GP_FAULT_STEPS=5"}, 1)
			start := time.Now()
			time.Sleep(tc.late)
			j.startRank(t, 1)
			lateAt := time.Now()
			outs := j.wait(t, rdzv+margin+30*time.Second)
			if tc.late < rdzv {
				for r, out := range outs {
					if !strings.Contains(out, "done") {
						t.Errorf("rank %d started %v late (rendezvous timeout %v) did not complete:\n%s", r, tc.late, rdzv, out)
					}
				}
				return
			}
			at0, msg0, ok0 := failure(outs[0])
			switch {
			case !ok0:
				t.Errorf("rank 0 did not fail:\n%s", outs[0])
			case !strings.Contains(msg0, "rank 0") || !regexp.MustCompile(`ranks? \[?1\]?`).MatchString(strings.TrimPrefix(msg0, "rank 0")):
				t.Errorf("rank 0: want an error naming the missing rank 1, got %s", msg0)
			case at0.Sub(start) > rdzv+margin:
				t.Errorf("rank 0 failed %v after it started, rendezvous timeout %v", at0.Sub(start), rdzv)
			}
			t.Logf("rank 0, %v after start: %s", at0.Sub(start).Round(time.Millisecond), msg0)
			at1, msg1, ok1 := failure(outs[1])
			switch {
			case !ok1:
				t.Errorf("rank 1 did not fail:\n%s", outs[1])
			case !strings.Contains(msg1, "rank 1: rendezvous") || !strings.Contains(msg1, bed.Addr(0)):
				t.Errorf("rank 1: want a rendezvous error naming the store on %s, got %s", bed.Addr(0), msg1)
			case at1.Sub(lateAt) > rdzv+margin:
				t.Errorf("rank 1 failed %v after it started, rendezvous timeout %v", at1.Sub(lateAt), rdzv)
			}
			t.Logf("rank 1, %v after its late start: %s", at1.Sub(lateAt).Round(time.Millisecond), msg1)
		})
	}
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

var closeRE = regexp.MustCompile(`(?m)^close took (.*)$`)

// closeTook is what the worker said of its Close after the failure.
func closeTook(out string) string {
	if m := closeRE.FindStringSubmatch(out); m != nil {
		return "close took " + m[1]
	}
	return "no close"
}
