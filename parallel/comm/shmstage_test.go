//go:build linux

package comm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects the log lines of the groups of one test.
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

// TestStagedCollectives runs the shared-memory staged all-reduce, reduce-scatter, all-gather
// and broadcast (world >= 2) with the default chunk on sizes from 0 to several chunks, in
// every dtype: sums of small integers are exact, random floats within 1e-5 relative of the
// float64 reference (at most five float32 terms in [-1,1]); every rank and a second run
// agree bit for bit; moving data is exact. World 1 has nothing to stage and is checked the
// same way.
func TestStagedCollectives(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var logs lockedBuffer
			gs := shmMaker(t, n, WithDebug(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			ctx := context.Background()
			// 0, 1 and n-1 elements take the direct path; 3<<18+7 is three chunks and a bit
			// (1 MiB chunks), not divisible by n.
			for _, count := range []int{0, 1, n - 1, 7*n + 3, 100003, 3<<18 + 7} {
				for _, op := range []Op{Sum, Avg, Max, Min} {
					for _, integers := range []bool{true, false} {
						name := fmt.Sprintf("n%d/count%d/%v/int%v", n, count, op, integers)
						ins := make([][]float32, n)
						for r := range ins {
							ins[r] = input(r, count, integers)
						}
						want := reference(op, ins)
						tol := 1e-5
						if integers && op != Avg {
							tol = 0
						}
						var runs, rss [2][][]float32
						for i := range runs {
							runs[i], rss[i] = make([][]float32, n), make([][]float32, n)
							noErrors(t, onAll(gs, func(g Group) error {
								r := g.Rank()
								runs[i][r] = slices.Clone(ins[r])
								lo, hi := ShardRange(count, n, r)
								rss[i][r] = make([]float32, hi-lo)
								return errors.Join(g.AllReduce(F32(runs[i][r]), op).Wait(ctx),
									g.ReduceScatter(F32(rss[i][r]), F32(ins[r]), op).Wait(ctx))
							}))
						}
						for r := range n {
							compare(t, name, r, runs[0][r], want, tol)
							for i, v := range runs[0][r] {
								if b := math.Float32bits(v); b != math.Float32bits(runs[0][0][i]) || b != math.Float32bits(runs[1][r][i]) {
									t.Fatalf("%s: rank %d [%d] not bit-identical across ranks and runs", name, r, i)
								}
							}
							lo, hi := ShardRange(count, n, r)
							compare(t, name+"/reducescatter", r, rss[0][r], want[lo:hi], tol)
							for i, v := range rss[0][r] {
								if math.Float32bits(v) != math.Float32bits(rss[1][r][i]) {
									t.Fatalf("%s: rank %d reduce-scatter [%d] not bit-identical across runs", name, r, i)
								}
							}
						}
					}
				}
				checkStagedDTypes(t, gs, count)
				full := input(99, count, false)
				ag := make([][]float32, n)
				noErrors(t, onAll(gs, func(g Group) error {
					lo, hi := ShardRange(count, n, g.Rank())
					ag[g.Rank()] = make([]float32, count)
					return g.AllGather(F32(ag[g.Rank()]), F32(slices.Clone(full[lo:hi]))).Wait(ctx)
				}))
				for r := range n {
					if !slices.Equal(ag[r], full) {
						t.Fatalf("n%d count%d: rank %d all-gather wrong", n, count, r)
					}
				}
				for _, root := range []int{0, n - 1} {
					bc := make([][]float32, n)
					noErrors(t, onAll(gs, func(g Group) error {
						bc[g.Rank()] = make([]float32, count)
						if g.Rank() == root {
							copy(bc[root], full)
						}
						return g.Broadcast(F32(bc[g.Rank()]), root).Wait(ctx)
					}))
					for r := range n {
						if !slices.Equal(bc[r], full) {
							t.Fatalf("n%d count%d root %d: rank %d broadcast wrong", n, count, root, r)
						}
					}
				}
			}
			staged := strings.Count(logs.String(), "algo=staged")
			if n >= stagedMinWorld && staged == 0 {
				t.Errorf("world %d never took the staged path", n)
			}
			if n < stagedMinWorld && staged > 0 {
				t.Errorf("world %d took the staged path", n)
			}
		})
	}
}

// checkStagedDTypes all-reduces float64 and int64 buffers of count elements (exact integer
// sums) and checks every rank's result.
func checkStagedDTypes(t *testing.T, gs []Group, count int) {
	t.Helper()
	n := len(gs)
	f64 := make([]F64, n)
	i64 := make([]I64, n)
	noErrors(t, onAll(gs, func(g Group) error {
		r := g.Rank()
		f64[r], i64[r] = make(F64, count), make(I64, count)
		for i := range count {
			f64[r][i] = float64((i*(r+3))%1001 - 500)
			i64[r][i] = int64(i*(r+1)) << 20
		}
		return errors.Join(g.AllReduce(f64[r], Sum).Wait(context.Background()), g.AllReduce(i64[r], Max).Wait(context.Background()))
	}))
	for r := range n {
		for i := range count {
			var wf float64
			for p := range n {
				wf += float64((i*(p+3))%1001 - 500)
			}
			if f64[r][i] != wf || i64[r][i] != int64(i*n)<<20 {
				t.Fatalf("n%d count%d: rank %d [%d] = %v, %v; want %v, %v", n, count, r, i, f64[r][i], i64[r][i], wf, int64(i*n)<<20)
			}
		}
	}
}

// TestStagedKilledRank kills a rank while the survivors wait for it inside a staged
// collective of each kind, and inside the zero-copy all-reduce on AllocFloat32 buffers (the
// victim dies after reducing its slice, before saying so): every survivor fails naming it,
// promptly.
func TestStagedKilledRank(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	for _, op := range []string{"all-reduce", "all-reduce-shared", "reduce-scatter", "all-gather", "broadcast"} {
		t.Run(op, func(t *testing.T) {
			const n, victim = 4, 2
			gs := shmMaker(t, n, WithTimeout(10*time.Second))
			shared := make([][]float32, n)
			if op == "all-reduce-shared" {
				noErrors(t, onAll(gs, func(g Group) error {
					var err error
					shared[g.Rank()], err = AllocFloat32(context.Background(), g, 16<<20)
					return err
				}))
			}
			start := time.Now()
			errs := onAll(gs, func(g Group) error {
				buf := make([]float32, 16<<20)
				if op == "all-reduce-shared" {
					buf = shared[g.Rank()]
					if g.Rank() == victim {
						t := gs[victim].(*group).t.(*shmTransport)
						t.zeroCopyReduced = func() error {
							t.closeConns()
							return errors.New("killed")
						}
						g.AllReduce(F32(buf), Sum).Wait(context.Background())
						return nil
					}
				}
				if g.Rank() == victim {
					// Join late: the survivors are asleep in the staged collective, waiting
					// for the victim's chunks (all-reduce) or for slots it has not freed yet
					// (broadcast).
					time.Sleep(50 * time.Millisecond)
					gs[victim].(*group).t.(interface{ closeConns() }).closeConns()
					return nil
				}
				var w Work
				switch op {
				case "all-reduce", "all-reduce-shared":
					w = g.AllReduce(F32(buf), Sum)
				case "reduce-scatter":
					w = g.ReduceScatter(F32(make([]float32, len(buf)/n)), F32(buf), Sum)
				case "all-gather":
					w = g.AllGather(F32(buf), F32(make([]float32, len(buf)/n)))
				default:
					w = g.Broadcast(F32(buf), 0)
				}
				return w.Wait(context.Background())
			})
			wantPeerGone(t, errs, victim, start)
			if op == "all-reduce-shared" && zeroCopies(gs[0]) != 1 {
				t.Errorf("rank 0 took the zero-copy path %d times, want 1", zeroCopies(gs[0]))
			}
		})
	}
}

// TestStagedDesync: ranks that run different staged collectives fail with ErrMismatch.
func TestStagedDesync(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	gs := shmMaker(t, 3, WithTimeout(20*time.Second))
	start := time.Now()
	errs := onAll(gs, func(g Group) error {
		b := make([]float32, 1<<20)
		if g.Rank() == 0 {
			return g.AllReduce(F32(b), Sum).Wait(context.Background())
		}
		return g.Broadcast(F32(b), 0).Wait(context.Background())
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
	t.Log(errs)
	if !strings.Contains(errors.Join(errs...).Error(), "desync") {
		t.Errorf("no error names the desync: %v", errs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestStagedTimeout: a rank that never joins leaves the others waiting inside the staged
// all-reduce until the group's timeout, which ends it with ErrTimeout.
func TestStagedTimeout(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	gs := shmMaker(t, 3, WithTimeout(300*time.Millisecond))
	start := time.Now()
	errs := onAll(gs[:2], func(g Group) error {
		return g.AllReduce(F32(make([]float32, 1<<20)), Sum).Wait(context.Background())
	})
	for r, err := range errs {
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("rank %d: %v, want ErrTimeout", r, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
