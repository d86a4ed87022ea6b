package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// The test binary doubles as the worker of the multi-process tests: with procWorkerVar set
// (see TestMain) it runs that scenario as one rank, configured by the torchrun variables,
// with the fake libraries its parent built (inherited through NCCL_LIBRARY and friends).
const procWorkerVar = "GP_NCCL_TEST_WORKER"

// big is a float32 count whose buffers (1.2 MB) take several rounds of the fake's 1 MiB
// staging areas; msgBig is a message longer than its 1 MiB Send/Recv ring.
const big, msgBig = 300_001, 786_433

func procWorker(scenario string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// Each process has one (fake) device, ordinal 0, as under CUDA_VISIBLE_DEVICES.
	g, err := InitFromEnv(ctx, WithDevice(0), WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer g.Close(context.Background())
	switch scenario {
	case "collectives":
		if err := procCollectives(g); err != nil {
			return fmt.Errorf("rank %d: %w", g.Rank(), err)
		}
		fmt.Println("collectives ok")
		return nil
	case "abort", "exit":
		return procPeerFails(ctx, g, scenario)
	case "ddp":
		return procDDP(ctx, g)
	}
	return fmt.Errorf("unknown scenario %q", scenario)
}

// val is rank's input element i: small integers, so that sums are exact in any order.
func val(rank, i int) float32 { return float32((rank+1)*(i%97) - 3*rank) }

func same[T comparable](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// procCollectives runs every operation of the group against a reference computed here from
// every rank's inputs.
func procCollectives(g *Group) error {
	n, r := g.Size(), g.Rank()
	var errs []error
	check := func(err error) { errs = append(errs, err) }

	ar, want := make(comm.F32, big), make(comm.F32, big)
	for i := range ar {
		ar[i] = val(r, i)
		for k := range n {
			want[i] += val(k, i)
		}
	}
	check(wait(g.AllReduce(ar, comm.Sum)))
	check(same("all-reduce sum", ar, want))

	mx, wantMx := make(comm.F64, 1000), make(comm.F64, 1000)
	for i := range mx {
		f := func(k int) float64 { return float64((i*7+k*13)%29) - 0.5*float64(k) }
		mx[i], wantMx[i] = f(r), math.Inf(-1)
		for k := range n {
			wantMx[i] = math.Max(wantMx[i], f(k))
		}
	}
	check(wait(g.AllReduce(mx, comm.Max)))
	check(same("all-reduce max", mx, wantMx))

	// Beyond 2^53, so a reduction through float64 would round.
	iv, wantI := comm.I64{1<<55 + int64(r), -int64(r) * 3}, comm.I64{0, 0}
	for k := range n {
		wantI[0] += 1<<55 + int64(k)
		wantI[1] -= int64(k) * 3
	}
	check(wait(g.AllReduce(iv, comm.Sum)))
	check(same("all-reduce int64 sum", iv, wantI))

	root := n - 1
	bc, wantBc := make(comm.F32, big), make(comm.F32, big)
	for i := range bc {
		bc[i], wantBc[i] = -1, val(root, i)
		if r == root {
			bc[i] = val(root, i)
		}
	}
	check(wait(g.Broadcast(bc, root)))
	check(same("broadcast", bc, wantBc))

	// Totals that n does not divide, small and over several staging rounds.
	for _, total := range []int{7, 2*big + 1} {
		owner := func(i int) float32 {
			for k := range n {
				if lo, hi := comm.ShardRange(total, n, k); i >= lo && i < hi {
					return float32(k*10000 + i%1000)
				}
			}
			return -1
		}
		lo, hi := comm.ShardRange(total, n, r)
		src, ag, wantAg := make(comm.F32, hi-lo), make(comm.F32, total), make(comm.F32, total)
		for i := range wantAg {
			wantAg[i] = owner(i)
		}
		copy(src, wantAg[lo:hi])
		check(wait(g.AllGather(ag, src)))
		check(same(fmt.Sprintf("all-gather of %d", total), ag, wantAg))

		full, rs, wantRs := make(comm.F32, total), make(comm.F32, hi-lo), make(comm.F32, hi-lo)
		for i := range full {
			full[i] = val(r, i)
		}
		for i := range wantRs {
			for k := range n {
				wantRs[i] += val(k, lo+i)
			}
		}
		check(wait(g.ReduceScatter(rs, full, comm.Sum)))
		check(same(fmt.Sprintf("reduce-scatter of %d", total), rs, wantRs))
	}

	check(wait(g.Barrier()))

	// Every rank sends a small and a long message to the next and receives from the
	// previous, posting its receives first.
	to, from := (r+1)%n, (r+n-1)%n
	small, long := comm.F64{float64(r), 2.5, -1}, make(comm.F32, msgBig)
	for i := range long {
		long[i] = val(r, i)
	}
	inSmall, inLong := make(comm.F64, 3), make(comm.F32, msgBig)
	wantLong := make(comm.F32, msgBig)
	for i := range wantLong {
		wantLong[i] = val(from, i)
	}
	rs, rl := g.Recv(inSmall, from, 0), g.Recv(inLong, from, 1)
	ss, sl := g.Send(small, to, 0), g.Send(long, to, 1)
	check(errors.Join(wait(ss), wait(sl), wait(rs), wait(rl)))
	check(same("small message", inSmall, comm.F64{float64(from), 2.5, -1}))
	check(same("long message", inLong, wantLong))

	check(procDevice(g, want))
	return errors.Join(errs...)
}

// procDevice all-reduces device memory: float32 over several rounds (want is the sum of val),
// and the 16-bit floats on small integers, exact in both.
func procDevice(g *Group, want comm.F32) error {
	n, r, c := g.Size(), g.Rank(), g.Context()
	host := make([]float32, big)
	for i := range host {
		host[i] = val(r, i)
	}
	p, err := c.MemAlloc(4 * big)
	if err != nil {
		return err
	}
	defer c.MemFree(p)
	if err := c.CopyHtoD(p, unsafe.Pointer(&host[0]), 4*big); err != nil {
		return err
	}
	if err := wait(g.AllReduceDevice(p, big, libnccl.Float32, comm.Sum)); err != nil {
		return err
	}
	if err := c.CopyDtoH(unsafe.Pointer(&host[0]), p, 4*big); err != nil {
		return err
	}
	if err := same("device all-reduce", host, want); err != nil {
		return err
	}
	// 1.0 is 0x3f80 in bfloat16 and 0x3c00 in float16; rank r contributes r+1, 2(r+1), ...
	for _, c16 := range []struct {
		dt  libnccl.DataType
		enc func(float32) uint16
	}{{libnccl.Bfloat16, func(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) }}, {libnccl.Float16, f16}} {
		dt, e := c16.dt, c16.enc
		h, w := make([]uint16, 8), make([]uint16, 8)
		for i := range h {
			h[i] = e(float32((r + 1) * (i + 1)))
			var s float32
			for k := range n {
				s += float32((k + 1) * (i + 1))
			}
			w[i] = e(s)
		}
		if err := c.CopyHtoD(p, unsafe.Pointer(&h[0]), 16); err != nil {
			return err
		}
		if err := wait(g.AllReduceDevice(p, 8, dt, comm.Sum)); err != nil {
			return err
		}
		if err := c.CopyDtoH(unsafe.Pointer(&h[0]), p, 16); err != nil {
			return err
		}
		if err := same(fmt.Sprintf("device all-reduce of type %d", dt), h, w); err != nil {
			return err
		}
	}
	return nil
}

// f16 encodes a small non-negative integer (below 2048) as IEEE half precision.
func f16(x float32) uint16 {
	if x == 0 {
		return 0
	}
	v, e := uint32(x), uint32(15)
	for v >= 2 {
		v >>= 1
		e++
	}
	m := uint32(x) - 1<<(e-15)
	return uint16(e<<10 | m<<(10-(e-15)))
}

// procPeerFails: rank 1 aborts its communicator ("abort") or is SIGKILLed ("exit") while
// the other ranks wait in an all-reduce; they must fail by themselves, not hang until their
// context ends.
func procPeerFails(ctx context.Context, g *Group, scenario string) error {
	if err := wait(g.Barrier()); err != nil {
		return err
	}
	if g.Rank() == 1 {
		// Give rank 0 time to block in its all-reduce; the outcome does not depend on it.
		time.Sleep(300 * time.Millisecond)
		if scenario == "exit" {
			proctest.KillSelf()
		}
		g.coll.abort(fmt.Errorf("rank 1: test abort: %w", comm.ErrAborted))
		if err := wait(g.Barrier()); !errors.Is(err, comm.ErrAborted) {
			return fmt.Errorf("after its own abort rank 1 got %v, want comm.ErrAborted", err)
		}
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := g.AllReduce(comm.F32{1}, comm.Sum).Wait(wctx)
	if err == nil || wctx.Err() != nil {
		return fmt.Errorf("want the all-reduce to fail because of rank 1, got %v", err)
	}
	if scenario == "abort" && !strings.Contains(err.Error(), "communicator aborted") {
		return fmt.Errorf("want the peer's abort, got %w", err)
	}
	if scenario == "exit" && (!errors.Is(err, comm.ErrPeerGone) || !strings.Contains(err.Error(), "rank 1")) {
		return fmt.Errorf("want comm.ErrPeerGone naming rank 1, got %w", err)
	}
	if err2 := wait(g.Barrier()); err2 == nil {
		return errors.New("group not poisoned after the peer failed")
	}
	fmt.Println("survivor saw:", err)
	return nil
}

// spawnRanks runs world ranks of scenario as processes and checks that the fake NCCL left
// no shared-memory segment behind.
func spawnRanks(t *testing.T, world int, scenario string) proctest.Job {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cudatest.Require(t)
	job := proctest.Spawn(t, world, procWorkerVar, scenario, func(int) []string {
		return []string{"GP_RDZV_SECRET=nccl-test"}
	})
	noSegments(t, job.Pids...)
	return job
}

// noSegments fails t when /dev/shm holds a segment of the fake NCCL made by one of pids (the
// unique id names its maker).
func noSegments(t *testing.T, pids ...int) {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Logf("no /dev/shm to check: %v", err)
		return
	}
	for _, e := range ents {
		for _, p := range pids {
			if strings.HasPrefix(e.Name(), "gpfakenccl-"+strconv.Itoa(p)+"-") {
				t.Errorf("left in /dev/shm: %s", e.Name())
			}
		}
	}
}

// Two processes, each with its own fake device, run every collective through the fake NCCL's
// shared-memory clique; each rank checks its results against the reference it computes from
// all ranks' inputs.
func TestProcessesCollectives(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			job := spawnRanks(t, world, "collectives")
			for r, err := range job.Errs {
				if err != nil || !strings.Contains(job.Outputs[r], "collectives ok") {
					t.Errorf("rank %d: %v\n%s", r, err, job.Outputs[r])
				}
			}
		})
	}
}

// A peer process (rank 1) that aborts its communicator, or dies, fails the pending
// all-reduce of every other process with an error instead of a hang; at world 3 one survivor
// learns of the death from the other, through the segment, and still names rank 1.
func TestProcessesPeerFails(t *testing.T) {
	for _, world := range []int{2, 3} {
		for _, sc := range []string{"abort", "exit"} {
			t.Run(fmt.Sprintf("world%d/%s", world, sc), func(t *testing.T) {
				job := spawnRanks(t, world, sc)
				for r := range world {
					if r == 1 {
						if (sc == "exit") == (job.Errs[1] == nil) {
							t.Errorf("rank 1 exited with %v\n%s", job.Errs[1], job.Outputs[1])
						}
						continue
					}
					if job.Errs[r] != nil || !strings.Contains(job.Outputs[r], "survivor saw") {
						t.Errorf("rank %d: %v\n%s", r, job.Errs[r], job.Outputs[r])
					}
					t.Log(strings.TrimSpace(job.Outputs[r]))
				}
			})
		}
	}
}

// Ranks that call different collectives (here: all-reduces of different lengths) all fail
// with the fake's invalid usage instead of reading each other's buffers out of bounds, and
// the groups of this process leave nothing in /dev/shm.
func TestMismatchedCollectiveFails(t *testing.T) {
	gs := groups(t, 2)
	err := each(gs, func(r int, g *Group) error {
		err := wait(g.AllReduce(make(comm.F32, 3+r), comm.Sum))
		if err == nil || !strings.Contains(err.Error(), "invalid usage") {
			return fmt.Errorf("rank %d: want invalid usage, got %v", r, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	noSegments(t, os.Getpid())
}

// A rank whose peers never join fails after the fake's init timeout and unlinks its segment.
func TestInitTimeoutLeavesNoSegment(t *testing.T) {
	cudatest.Require(t)
	t.Setenv("GP_FAKE_NCCL_INIT_TIMEOUT", "0.2")
	id, err := libnccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := libnccl.CommInitRank(2, id, 0); err == nil || !strings.Contains(err.Error(), "not every rank joined") {
		t.Fatalf("init without the peer: %v", err)
	}
	noSegments(t, os.Getpid())
}

// A segment left by a killed job (its maker gone, older than the init timeout) is unlinked
// by the next unique id made on the machine.
func TestStaleSegmentSwept(t *testing.T) {
	cudatest.Require(t)
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	stale := fmt.Sprintf("/dev/shm/gpfakenccl-%d-1-0000000000000000", pid)
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stale)
	t.Setenv("GP_FAKE_NCCL_INIT_TIMEOUT", "0.1")
	if _, err := libnccl.GetUniqueID(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("swept before it was older than the init timeout: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := libnccl.GetUniqueID(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale segment of dead process %d still there: %v", pid, err)
	}
}

// The fake's calls block until every rank arrives, so wait's deadline is never reached;
// WithTimeout must still bound a collective that a peer never enters, aborting the
// communicator with comm.ErrTimeout (not a hang until the caller's context ends).
func TestTimeoutBoundsBlockedCollective(t *testing.T) {
	gs := groups(t, 2, WithTimeout(200*time.Millisecond))
	err := wait(gs[0].AllReduce(comm.F32{1}, comm.Sum))
	if !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("all-reduce no peer entered: %v, want comm.ErrTimeout", err)
	}
	if err := wait(gs[0].Barrier()); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("after the timeout: %v, want the group poisoned with comm.ErrTimeout", err)
	}
}
