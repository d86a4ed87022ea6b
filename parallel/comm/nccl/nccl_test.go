package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

func TestMain(m *testing.M) {
	if os.Getenv(procWorkerVar) != "" {
		proctest.Main(m, procWorkerVar, procWorker) // a rank of process_test.go: runs and exits
	}
	os.Exit(cudatest.Main(m))
}

// groups builds world NCCL groups in this process over a loopback store and the fake libraries.
func groups(t *testing.T, world int, opts ...Option) []*Group {
	t.Helper()
	cudatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", world)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	gs := make([]*Group, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := store.Dial(ctx, srv.Addr())
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { st.Close() })
			gs[r], errs[r] = New(ctx, st, r, world, opts...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close(context.Background())
		}
	})
	return gs
}

// each runs f on every rank concurrently and joins the errors.
func each(gs []*Group, f func(r int, g *Group) error) error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r, g) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func wait(w comm.Work) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.Wait(ctx)
}

// The NCCL group gives the same results as comm's in-process reference group, for every
// collective, dtype and world size, including shards that Size() does not divide.
func TestCollectivesMatchReference(t *testing.T) {
	for _, world := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("world", world), func(t *testing.T) {
			gs := groups(t, world)
			ref := comm.NewLocalGroups(world)
			defer func() {
				for _, g := range ref {
					g.Close(context.Background())
				}
			}()
			const total = 10 // not divisible by 3
			mk := func(r int) comm.F32 {
				b := make(comm.F32, total)
				for i := range b {
					b[i] = float32(r*100 + i)
				}
				return b
			}
			type result struct {
				ar, bc, ag, rs comm.F32
				ari            comm.I64
				ard            comm.F64
			}
			run := func(r int, g comm.Group) (res result, err error) {
				res.ar, res.bc = mk(r), mk(r)
				res.ari = comm.I64{int64(r + 1), -7}
				res.ard = comm.F64{float64(r) / 3}
				lo, hi := comm.ShardRange(total, world, r)
				res.ag = make(comm.F32, total)
				res.rs = make(comm.F32, hi-lo)
				err = errors.Join(wait(g.AllReduce(res.ar, comm.Sum)), wait(g.Broadcast(res.bc, world-1)),
					wait(g.AllGather(res.ag, mk(r)[lo:hi])), wait(g.ReduceScatter(res.rs, mk(r), comm.Max)),
					wait(g.AllReduce(res.ari, comm.Avg)), wait(g.AllReduce(res.ard, comm.Min)), wait(g.Barrier()))
				return res, err
			}
			got, want := make([]result, world), make([]result, world)
			if err := each(gs, func(r int, g *Group) (err error) { got[r], err = run(r, g); return }); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for r, g := range ref {
				wg.Add(1)
				go func() { defer wg.Done(); want[r], _ = run(r, g) }()
			}
			wg.Wait()
			for r := range world {
				if fmt.Sprint(got[r]) != fmt.Sprint(want[r]) {
					t.Errorf("rank %d:\n got %v\nwant %v", r, got[r], want[r])
				}
			}
		})
	}
}

func TestSendRecvBesideCollectives(t *testing.T) {
	gs := groups(t, 2)
	err := each(gs, func(r int, g *Group) error {
		out := comm.F64{float64(r), 2}
		in := make(comm.F64, 2)
		// Both ranks post their Recv before their Send: the p2p worker must not serialise
		// them behind each other in a way that deadlocks (the fake buffers sends).
		rw := g.Recv(in, 1-r, 0)
		sw := g.Send(out, 1-r, 0)
		if err := errors.Join(wait(sw), wait(rw)); err != nil {
			return err
		}
		if in[0] != float64(1-r) {
			return fmt.Errorf("rank %d received %v", r, in)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInvalidAndClosed(t *testing.T) {
	gs := groups(t, 1)
	g := gs[0]
	if err := wait(g.Broadcast(comm.F32{1}, 3)); !errors.Is(err, comm.ErrInvalid) {
		t.Fatalf("bad root: %v", err)
	}
	if err := wait(g.ReduceScatter(make(comm.F32, 2), make(comm.F32, 3), comm.Sum)); !errors.Is(err, comm.ErrInvalid) {
		t.Fatalf("bad shard: %v", err)
	}
	if err := wait(g.Send(comm.F32{1}, 0, 0)); !errors.Is(err, comm.ErrInvalid) {
		t.Fatalf("send to self: %v", err)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := wait(g.AllReduce(comm.F32{1}, comm.Sum)); !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// A collective that only one rank enters is aborted by its Wait's context, and the group is
// poisoned afterwards.
func TestCancelAbortsAndPoisons(t *testing.T) {
	gs := groups(t, 2, WithTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := gs[0].AllReduce(comm.F32{1}, comm.Sum).Wait(ctx)
	if !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("cancelled all-reduce: %v", err)
	}
	if err2 := wait(gs[0].Barrier()); err2 == nil {
		t.Fatal("group not poisoned after abort")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(context.Background(), nil, 0, 1); !errors.Is(err, comm.ErrInvalid) {
		t.Fatalf("nil store: %v", err)
	}
}

// Built with CGO_ENABLED=0 (or without a GPU), New fails with an error that says why.
func TestNewWithoutLibraries(t *testing.T) {
	if cudatest.Cgo {
		t.Skip("built with cgo: covered by the fake-library tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := store.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(ctx, st, 0, 1); err == nil || !strings.Contains(err.Error(), "built without cgo") {
		t.Fatalf("New: %v", err)
	}
}
