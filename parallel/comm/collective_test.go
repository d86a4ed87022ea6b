package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"
)

// makeGroups builds a world of n ranks for a test; kinds are "local" and "tcp" (loopback
// sockets inside this process).
type groupMaker func(t testing.TB, n int, opts ...Option) []Group

func localMaker(t testing.TB, n int, opts ...Option) []Group {
	gs := NewLocalGroups(n, opts...)
	t.Cleanup(func() { closeAll(gs) })
	return gs
}

func closeAll(gs []Group) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); g.Close(ctx) }()
	}
	wg.Wait()
}

// onAll runs fn on every rank concurrently and returns the per-rank errors.
func onAll(gs []Group, fn func(g Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(g) }()
	}
	wg.Wait()
	return errs
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// input is rank r's deterministic input: small integers (exact in float32 sums) or random
// floats (which make the reduction order visible).
func input(r, count int, integers bool) []float32 {
	rng := rand.New(rand.NewSource(int64(r*7919 + count)))
	x := make([]float32, count)
	for i := range x {
		if integers {
			x[i] = float32(rng.Intn(201) - 100)
		} else {
			x[i] = rng.Float32()*2 - 1
		}
	}
	return x
}

func reference(op Op, ins [][]float32) []float64 {
	out := make([]float64, len(ins[0]))
	for i := range out {
		acc := float64(ins[0][i])
		for _, in := range ins[1:] {
			v := float64(in[i])
			switch op {
			case Sum, Avg:
				acc += v
			case Max:
				acc = math.Max(acc, v)
			case Min:
				acc = math.Min(acc, v)
			}
		}
		if op == Avg {
			acc /= float64(len(ins))
		}
		out[i] = acc
	}
	return out
}

// testSizes are the element counts every collective is checked at for world n.
func testSizes(n int) []int {
	return slices.Compact([]int{0, 1, max(1, n-1), 7*n + 3, 20011, 100003})
}

// checkCollectives runs all-reduce, reduce-scatter, all-gather and broadcast on every size and
// op and compares with the reference; exact for integer inputs, 1e-5 relative for random
// floats (float32 sums of at most 5 terms in [-1,1] differ from float64 by a few ulps).
func checkCollectives(t *testing.T, mk groupMaker, n int, opts ...Option) {
	gs := mk(t, n, opts...)
	ctx := context.Background()
	for _, count := range testSizes(n) {
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
				ar := make([][]float32, n)
				rs := make([][]float32, n)
				noErrors(t, onAll(gs, func(g Group) error {
					r := g.Rank()
					ar[r] = slices.Clone(ins[r])
					lo, hi := ShardRange(count, n, r)
					rs[r] = make([]float32, hi-lo)
					w1 := g.AllReduce(F32(ar[r]), op)
					w2 := g.ReduceScatter(F32(rs[r]), F32(ins[r]), op) // outstanding together
					return errors.Join(w1.Wait(ctx), w2.Wait(ctx))
				}))
				for r := range n {
					compare(t, name+"/allreduce", r, ar[r], want, tol)
					if !slices.Equal(ar[r], ar[0]) && !hasNaN(ar[0]) {
						t.Fatalf("%s: rank %d all-reduce differs bitwise from rank 0", name, r)
					}
					lo, hi := ShardRange(count, n, r)
					compare(t, name+"/reducescatter", r, rs[r], want[lo:hi], tol)
				}
			}
		}
		// all-gather and broadcast move data without arithmetic: exact.
		full := input(99, count, false)
		ag := make([][]float32, n)
		bc := make([][]float32, n)
		root := count % n
		noErrors(t, onAll(gs, func(g Group) error {
			r := g.Rank()
			lo, hi := ShardRange(count, n, r)
			ag[r] = make([]float32, count)
			bc[r] = make([]float32, count)
			if r == root {
				copy(bc[r], full)
			}
			w1 := g.AllGather(F32(ag[r]), F32(slices.Clone(full[lo:hi])))
			w2 := g.Broadcast(F32(bc[r]), root)
			return errors.Join(w1.Wait(ctx), w2.Wait(ctx))
		}))
		for r := range n {
			if !slices.Equal(ag[r], full) {
				t.Fatalf("n%d count%d: rank %d all-gather wrong", n, count, r)
			}
			if !slices.Equal(bc[r], full) {
				t.Fatalf("n%d count%d: rank %d broadcast wrong", n, count, r)
			}
		}
	}
}

func hasNaN(x []float32) bool { return slices.ContainsFunc(x, func(v float32) bool { return v != v }) }

func compare(t *testing.T, name string, r int, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: rank %d: len %d, want %d", name, r, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*math.Max(1, math.Abs(want[i])) {
			t.Fatalf("%s: rank %d [%d] = %v, want %v (tol %g)", name, r, i, got[i], want[i], tol)
		}
	}
}

func TestLocalCollectives(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			// Small chunks and threshold so that the ring, multi-chunk pipelining and the
			// direct algorithms all run on these sizes.
			checkCollectives(t, localMaker, n, WithChunkBytes(4096), WithSmallBytes(1024), WithStreams(2))
		})
	}
}
