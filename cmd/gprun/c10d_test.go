package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// c10dWorker is the worker of the c10d tests: it joins the group, all-reduces rank+1 and
// prints the world, the sum and the transport. "once" exits then; "elastic" exits only in
// a world of 2 once the file GPRUN_TEST_PHASE says "final", and otherwise waits to be
// restarted by a change of membership.
func c10dWorker(mode string) int {
	ctx := context.Background()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(20*time.Second), comm.WithConnectTimeout(20*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	defer g.Close(ctx)
	b := comm.F64{float64(g.Rank() + 1)}
	if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "all-reduce:", err)
		return 1
	}
	fmt.Printf("world %d rank %d sum %v via %s\n", g.Size(), g.Rank(), b[0], comm.TransportOf(g))
	if mode == "once" {
		return 0
	}
	for start := time.Now(); time.Since(start) < 40*time.Second; time.Sleep(50 * time.Millisecond) {
		if phase, _ := os.ReadFile(os.Getenv("GPRUN_TEST_PHASE")); string(phase) == "final" && g.Size() == 2 {
			return 0
		}
	}
	return 3
}

// gprunNode is one gprun "node" of a test, run in this process.
type gprunNode struct {
	out    lockedBuffer
	code   int
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(ctx context.Context, args ...string) *gprunNode {
	ctx, cancel := context.WithCancel(ctx)
	n := &gprunNode{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		n.code = run(ctx, append(args, "--", os.Args[0], "-test.run=^$"), &n.out, &n.out, nil)
	}()
	return n
}

// wait waits for gprun to exit, stopping it after d.
func (n *gprunNode) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-n.done:
	case <-time.After(d):
		n.cancel()
		<-n.done
		t.Errorf("gprun did not finish within %v", d)
	}
}

// waitFor waits until the node's output has s count times.
func (n *gprunNode) waitFor(t *testing.T, s string, count int, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Count(n.out.String(), s) >= count {
			return
		}
	}
	t.Fatalf("no %d× %q within %v; output:\n%s", count, s, d, n.out.String())
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Two gprun instances with --nnodes 2 and the c10d backend on one machine, TCP forced: the
// one whose address is the endpoint hosts the rendezvous, and the four workers all-reduce.
func TestC10dTwoNodes(t *testing.T) {
	t.Setenv("GPRUN_TEST_C10D", "once")
	t.Setenv("GP_COMM_TRANSPORT", "tcp")
	ep := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	var nodes []*gprunNode
	for range 2 {
		nodes = append(nodes, startNode(ctx, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
			"--rdzv-endpoint", ep, "--rdzv-id", "c10dtest", "--local-addr", "127.0.0.1", "--rdzv-secret", "s3cret"))
	}
	for i, n := range nodes {
		n.wait(t, 50*time.Second)
		out := n.out.String()
		if n.code != 0 || strings.Count(out, "world 4 ") != 2 || !strings.Contains(out, "sum 10 via tcp") {
			t.Errorf("node %d: exit %d, want 0 and two workers of a world of 4 summing 10 over tcp; output:\n%s", i, n.code, out)
		}
	}
	if !strings.Contains(nodes[0].out.String()+nodes[1].out.String(), "hosting the store on "+ep) {
		t.Errorf("no node says it hosts the store on %s", ep)
	}
	t.Logf("two c10d nodes in %v", time.Since(start).Round(time.Millisecond))
}

// --nnodes 1:2 is elastic: two nodes start together; one is lost (its gprun stops) and the
// other goes on alone in a new round; a third node joins and the job continues with two.
// Neither change counts as a restart (--max-restarts 0), as in torchrun.
func TestC10dElastic(t *testing.T) {
	phase := filepath.Join(t.TempDir(), "phase")
	if err := os.WriteFile(phase, []byte("start"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPRUN_TEST_C10D", "elastic")
	t.Setenv("GPRUN_TEST_PHASE", phase)
	t.Setenv("GP_COMM_TRANSPORT", "tcp")
	ep := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", ep,
		"--rdzv-id", "elastic", "--local-addr", "127.0.0.1", "--monitor-interval", "0.05",
		"--rdzv-conf", "last_call_timeout=1,keep_alive_interval=0.2,keep_alive_max_attempt=3"}
	start := time.Now()
	host := startNode(ctx, args...)
	host.waitFor(t, "hosting the store on "+ep, 1, 10*time.Second)
	other := startNode(ctx, args...)
	host.waitFor(t, "world 2 ", 1, 30*time.Second)
	other.waitFor(t, "world 2 ", 1, 30*time.Second)
	lost := time.Now()
	other.cancel() // the node is lost: its workers are stopped, its heartbeats end
	other.wait(t, 20*time.Second)
	host.waitFor(t, "world 1 ", 1, 30*time.Second)
	t.Logf("continued alone %v after the loss", time.Since(lost).Round(time.Millisecond))
	if err := os.WriteFile(phase, []byte("final"), 0o644); err != nil {
		t.Fatal(err)
	}
	joined := time.Now()
	third := startNode(ctx, args...)
	host.wait(t, 40*time.Second)
	third.wait(t, 40*time.Second)
	t.Logf("took in the new node and finished %v after it started; %v in all", time.Since(joined).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
	hostOut, thirdOut := host.out.String(), third.out.String()
	for _, want := range []string{"round 0 complete: 2 nodes", "ended: node 1 lost", "round 1 complete: 1 nodes",
		"waiting to join 1 of at most 2", "round 2 complete: 2 nodes"} {
		if !strings.Contains(hostOut, want) {
			t.Errorf("host: no %q", want)
		}
	}
	if host.code != 0 || third.code != 0 || strings.Count(hostOut, "world 2 ") != 2 || !strings.Contains(thirdOut, "world 2 ") ||
		strings.Contains(hostOut, "restarting the workers (1/") {
		t.Errorf("host exit %d, third exit %d; want both 0, the host in a world of 2 twice, no restart counted; host:\n%s\nthird:\n%s",
			host.code, third.code, hostOut, thirdOut)
	}
}
