package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestKilledRankNamedBySurvivors(t *testing.T) {
	for _, backend := range []string{"local", "tcp", "shm"}[:3-b2i(raceEnabled)] {
		t.Run(backend, func(t *testing.T) {
			const n, victim = 4, 2
			opts := []Option{WithTimeout(10 * time.Second), WithChunkBytes(4096)}
			var gs []Group
			var kill func()
			if backend == "local" {
				net := NewLocalNetwork(n, opts...)
				// Slow every frame down so the all-reduce is still running when the rank dies.
				net.SetFaults(func(from, to, s int, h *Header) Fault { return Fault{Delay: time.Millisecond} })
				for r := range n {
					gs = append(gs, NewGroup(net.Transport(r), opts...))
				}
				kill = func() { net.Kill(victim) }
				t.Cleanup(func() { closeAll(gs) })
			} else if backend == "tcp" {
				gs = tcpMaker(t, n, opts...)
				// Closing every socket of a rank is what the kernel does when its process dies.
				kill = func() { gs[victim].(*group).t.(*tcpTransport).closeConns() }
			} else {
				gs = shmMaker(t, n, opts...)
				// A dead process cannot signal through shared memory; its control connections
				// close, which is how the survivors learn of it (real SIGKILL: process_test.go).
				kill = func() { gs[victim].(*group).t.(interface{ closeConns() }).closeConns() }
			}
			start := time.Now()
			errs := onAll(gs, func(g Group) error {
				buf := make([]float32, 4<<20)
				if g.Rank() == victim && backend == "shm" {
					// Shared memory finishes 16 MB before a 20 ms sleep ends: join late, so
					// the survivors are stuck mid-all-reduce waiting for the victim.
					time.Sleep(20 * time.Millisecond)
				}
				w := g.AllReduce(F32(buf), Sum)
				if g.Rank() == victim {
					if backend == "shm" {
						time.Sleep(time.Millisecond)
					} else {
						time.Sleep(20 * time.Millisecond)
					}
					kill()
				}
				return w.Wait(context.Background())
			})
			wantPeerGone(t, errs, victim, start)
			// The group stays failed.
			if err := gs[0].Barrier().Wait(context.Background()); !errors.Is(err, ErrPeerGone) {
				t.Errorf("after failure: %v", err)
			}
		})
	}
}

func TestMismatchedSizes(t *testing.T) {
	for _, mk := range []struct {
		name string
		mk   groupMaker
	}{{"local", localMaker}, {"tcp", tcpMaker}, {"shm", shmMaker}}[:3-b2i(raceEnabled)] {
		for _, count := range []int{10, 100000} {
			t.Run(fmt.Sprintf("%s/%d", mk.name, count), func(t *testing.T) {
				gs := mk.mk(t, 3, WithTimeout(20*time.Second), WithChunkBytes(4096))
				start := time.Now()
				errs := onAll(gs, func(g Group) error {
					c := count
					if g.Rank() == 1 {
						c++
					}
					return g.AllReduce(F32(make([]float32, c)), Sum).Wait(context.Background())
				})
				for r, err := range errs {
					if !errors.Is(err, ErrMismatch) {
						t.Errorf("rank %d: %v, want ErrMismatch", r, err)
					}
				}
				if !strings.Contains(errors.Join(errs...).Error(), fmt.Sprintf("x %d", count+1)) {
					t.Errorf("no error shows both views: %v", errs)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("took %v", d)
				}
			})
		}
	}
}

func TestDesyncDifferentOps(t *testing.T) {
	gs := localMaker(t, 2, WithTimeout(5*time.Second))
	errs := onAll(gs, func(g Group) error {
		if g.Rank() == 0 {
			return g.AllReduce(F32(make([]float32, 8)), Sum).Wait(context.Background())
		}
		return g.Broadcast(F32(make([]float32, 8)), 0).Wait(context.Background())
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "desync") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestTimeoutNamesPeer(t *testing.T) {
	net := NewLocalNetwork(2)
	opts := []Option{WithTimeout(200 * time.Millisecond)}
	gs := []Group{NewGroup(net.Transport(0), opts...), NewGroup(net.Transport(1), opts...)}
	t.Cleanup(func() { closeAll(gs) })
	net.SetFaults(func(from, to, s int, h *Header) Fault { return Fault{Drop: from == 1} })
	errs := onAll(gs, func(g Group) error { return g.AllReduce(F32(make([]float32, 4)), Sum).Wait(context.Background()) })
	if !errors.Is(errs[0], ErrTimeout) || !strings.Contains(errs[0].Error(), "recv from rank 1") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

func TestWaitCancelAborts(t *testing.T) {
	gs := localMaker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Rank 1 never joins: rank 0's Wait ends with its context.
	err := gs[0].AllReduce(F32(make([]float32, 4)), Sum).Wait(ctx)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("%v", err)
	}
}

func TestOutstandingAndDeterministic(t *testing.T) {
	for _, mk := range []struct {
		name string
		mk   groupMaker
	}{{"local", localMaker}, {"tcp", tcpMaker}, {"shm", shmMaker}}[:3-b2i(raceEnabled)] {
		t.Run(mk.name, func(t *testing.T) {
			const n = 3
			sizes := []int{0, 5, 1000, 70000, 3, 300001}
			run := func() [][][]float32 {
				gs := mk.mk(t, n, WithChunkBytes(8192))
				out := make([][][]float32, n)
				noErrors(t, onAll(gs, func(g Group) error {
					var ws []Work
					for i, c := range sizes {
						rng := rand.New(rand.NewSource(int64(g.Rank()*100 + i)))
						b := make([]float32, c)
						for j := range b {
							b[j] = float32(rng.NormFloat64())
						}
						out[g.Rank()] = append(out[g.Rank()], b)
						ws = append(ws, g.AllReduce(F32(b), Sum))
					}
					for _, w := range slices.Backward(ws) { // wait out of order
						if err := w.Wait(context.Background()); err != nil {
							return err
						}
					}
					return nil
				}))
				return out
			}
			a, b := run(), run()
			for r := range n {
				for i := range sizes {
					for j := range a[r][i] {
						if math.Float32bits(a[r][i][j]) != math.Float32bits(b[r][i][j]) ||
							math.Float32bits(a[r][i][j]) != math.Float32bits(a[0][i][j]) {
							t.Fatalf("rank %d op %d [%d]: not bit-identical across runs and ranks", r, i, j)
						}
					}
				}
			}
		})
	}
}

func TestSendRecvAndDTypes(t *testing.T) {
	for _, mk := range []struct {
		name string
		mk   groupMaker
	}{{"local", localMaker}, {"tcp", tcpMaker}, {"shm", shmMaker}}[:3-b2i(raceEnabled)] {
		t.Run(mk.name, func(t *testing.T) {
			gs := mk.mk(t, 3)
			ctx := context.Background()
			noErrors(t, onAll(gs, func(g Group) error {
				r := g.Rank()
				next, prev := (r+1)%3, (r+2)%3
				out := F64{float64(r), 0.5}
				in := make(F64, 2)
				ws := []Work{g.Send(out, next, 7), g.Recv(in, prev, 7)}
				i64 := I64{int64(r) * 10, -int64(r)}
				ws = append(ws, g.AllReduce(i64, Max))
				for _, w := range ws {
					if err := w.Wait(ctx); err != nil {
						return err
					}
				}
				if in[0] != float64(prev) || in[1] != 0.5 {
					return fmt.Errorf("rank %d received %v", r, in)
				}
				if i64[0] != 20 || i64[1] != 0 {
					return fmt.Errorf("rank %d max %v", r, i64)
				}
				return MonitoredBarrier(ctx, g, 5*time.Second)
			}))
		})
	}
}

func TestMonitoredBarrierNamesMissing(t *testing.T) {
	gs := localMaker(t, 4)
	var arrived atomic.Int32
	errs := onAll(gs, func(g Group) error {
		if g.Rank() == 3 {
			return nil // never arrives
		}
		arrived.Add(1)
		return MonitoredBarrier(context.Background(), g, 200*time.Millisecond)
	})
	for r := range 3 {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "ranks [3] did not arrive") {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	gs := localMaker(t, 2)
	ctx := context.Background()
	for _, w := range []Work{
		gs[0].AllGather(F32(make([]float32, 10)), F32(make([]float32, 4))),
		gs[0].ReduceScatter(F32(make([]float32, 4)), F32(make([]float32, 10)), Sum),
		gs[0].Broadcast(F32(nil), 5),
		gs[0].Send(F32(nil), 0, 1),
		gs[0].AllReduce(F32(nil), Op(9)),
	} {
		if err := w.Wait(ctx); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v, want ErrInvalid", err)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wantPeerGone checks that every rank but victim failed with ErrPeerGone naming victim, and
// within 5 s of start.
func wantPeerGone(t *testing.T, errs []error, victim int, start time.Time) {
	t.Helper()
	for r, err := range errs {
		if r != victim && (!errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), fmt.Sprintf("peer rank %d gone", victim))) {
			t.Errorf("rank %d: %v, want ErrPeerGone naming rank %d", r, err, victim)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("survivors took %v to notice", d)
	}
}
