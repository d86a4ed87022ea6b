package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

func init() {
	scenarios["collectives"] = collectives
	scenarios["errors"] = badInput
}

// Every collective and send/recv at world 2 and 3 against values each rank computes
// itself, through comm.InitFromEnv with GP_COMM_BACKEND=mpi; random float all-reduces end
// bit-identical on every rank.
func TestCollectives(t *testing.T) {
	requireMPI(t)
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", np), func(t *testing.T) {
			j := mpirun(t, np, "collectives", 60*time.Second, "GP_COMM_BACKEND=mpi")
			for r := range np {
				if want := fmt.Sprintf("rank %d of %d via mpi: ok", r, np); j.err != nil || !strings.Contains(j.out, want) {
					t.Fatalf("want %q: %v\n%s", want, j.err, j.out)
				}
			}
		})
	}
}

// Bad arguments fail at once with comm.ErrInvalid and leave the group usable; a receive
// cancelled by its context or its timeout fails alone.
func TestBadInput(t *testing.T) {
	requireMPI(t)
	j := mpirun(t, 2, "errors", 60*time.Second)
	for r := range 2 {
		if want := fmt.Sprintf("rank %d: errors ok", r); j.err != nil || !strings.Contains(j.out, want) {
			t.Fatalf("want %q: %v\n%s", want, j.err, j.out)
		}
	}
}

// input is rank r's element i: small integers, so that sums in any order are exact.
func input(r, i int) float64 { return float64((r*7+i*3)%23 - 11) }

func collectives() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(40*time.Second))
	if err != nil {
		return err
	}
	if tr := comm.TransportOf(g); tr != "mpi" {
		return fmt.Errorf("backend %q, want mpi", tr)
	}
	n, r := g.Size(), g.Rank()
	check := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	// Up to 1000 elements the all-reduce is MPI_Iallreduce; 1<<20+3 (over 4 MiB) runs the
	// package's ring over MPI messages (WithRingBytes), as does the 4 MiB random one below.
	for _, size := range []int{0, 1, 7, 1000, 1<<20 + 3} {
		for _, op := range []comm.Op{comm.Sum, comm.Avg, comm.Max, comm.Min} {
			want := make([]float64, size)
			for i := range want {
				v := input(0, i)
				for q := 1; q < n; q++ {
					switch x := input(q, i); op {
					case comm.Sum, comm.Avg:
						v += x
					case comm.Max:
						v = max(v, x)
					case comm.Min:
						v = min(v, x)
					}
				}
				want[i] = v
			}
			f32, f64, i64 := make(comm.F32, size), make(comm.F64, size), make(comm.I64, size)
			for i := range size {
				f32[i], f64[i], i64[i] = float32(input(r, i)), input(r, i), int64(input(r, i))
			}
			for _, b := range []comm.Buffer{f32, f64, i64} {
				if err := check(fmt.Sprintf("all-reduce %v %v x %d", op, b.DType(), size), g.AllReduce(b, op).Wait(ctx)); err != nil {
					return err
				}
			}
			for i, w := range want {
				wf, wd, wi := float32(w), w, int64(w)
				if op == comm.Avg {
					wf, wd, wi = float32(w)/float32(n), w/float64(n), int64(w)/int64(n)
				}
				if f32[i] != wf || f64[i] != wd || i64[i] != wi {
					return fmt.Errorf("all-reduce %v x %d: element %d: %v %v %v, want %v %v %v", op, size, i, f32[i], f64[i], i64[i], wf, wd, wi)
				}
			}
		}
		for _, root := range []int{0, n - 1} {
			b := make(comm.F64, size)
			for i := range b {
				b[i] = input(r, i)
			}
			if err := check("broadcast", g.Broadcast(b, root).Wait(ctx)); err != nil {
				return err
			}
			for i := range b {
				if b[i] != input(root, i) {
					return fmt.Errorf("broadcast from %d x %d: element %d: %v, want %v", root, size, i, b[i], input(root, i))
				}
			}
		}
		lo, hi := comm.ShardRange(size, n, r)
		for _, inPlace := range []bool{false, true} {
			dst := make(comm.F32, size)
			src := make(comm.F32, hi-lo)
			if inPlace {
				src = dst[lo:hi]
			}
			for i := range src {
				src[i] = float32(input(r, lo+i))
			}
			if err := check("all-gather", g.AllGather(dst, src).Wait(ctx)); err != nil {
				return err
			}
			for q := range n {
				qlo, qhi := comm.ShardRange(size, n, q)
				for i := qlo; i < qhi; i++ {
					if dst[i] != float32(input(q, i)) {
						return fmt.Errorf("all-gather x %d (in place %v): element %d: %v, want %v", size, inPlace, i, dst[i], input(q, i))
					}
				}
			}
			for _, op := range []comm.Op{comm.Sum, comm.Avg} {
				src := make(comm.F64, size)
				for i := range src {
					src[i] = input(r, i)
				}
				dst := make(comm.F64, hi-lo)
				if inPlace {
					dst = src[lo:hi] // overlaps src: received aside
				}
				if err := check("reduce-scatter", g.ReduceScatter(dst, src, op).Wait(ctx)); err != nil {
					return err
				}
				for i := range dst {
					w := 0.0
					for q := range n {
						w += input(q, lo+i)
					}
					if op == comm.Avg {
						w /= float64(n)
					}
					if dst[i] != w {
						return fmt.Errorf("reduce-scatter %v x %d (overlap %v): element %d: %v, want %v", op, size, inPlace, lo+i, dst[i], w)
					}
				}
			}
		}
	}
	if err := check("barrier", g.Barrier().Wait(ctx)); err != nil {
		return err
	}
	// Send/recv around the ring: two messages on one tag arrive in order, a third on another.
	next, prev := (r+1)%n, (r+n-1)%n
	var works []comm.Work
	got := []comm.I64{make(comm.I64, 5), make(comm.I64, 5), make(comm.I64, 3)}
	for k, tag := range []int{4, 4, 9} {
		works = append(works, g.Recv(got[k], prev, tag))
	}
	for k, tag := range []int{4, 4, 9} {
		msg := make(comm.I64, len(got[k]))
		for i := range msg {
			msg[i] = int64(1000*r + 100*k + i)
		}
		works = append(works, g.Send(msg, next, tag))
	}
	for _, w := range works {
		if err := check("send/recv", w.Wait(ctx)); err != nil {
			return err
		}
	}
	for k := range got {
		for i, v := range got[k] {
			if v != int64(1000*prev+100*k+i) {
				return fmt.Errorf("recv %d from %d: element %d: %d, want %d", k, prev, i, v, 1000*prev+100*k+i)
			}
		}
	}
	// Random floats: every rank must end with the same bits.
	for _, size := range []int{1000, 1 << 20} {
		rng := rand.New(rand.NewSource(int64(r)))
		b := make(comm.F32, size)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil {
			return err
		}
		h := fnv.New64a()
		for _, v := range b {
			fmt.Fprint(h, math.Float32bits(v))
		}
		sums := make(comm.I64, n)
		if err := g.AllGather(sums, comm.I64{int64(h.Sum64())}).Wait(ctx); err != nil {
			return err
		}
		for q := range n {
			if sums[q] != sums[0] {
				return fmt.Errorf("all-reduce of %d random floats: rank %d's result differs from rank 0's", size, q)
			}
		}
	}
	if err := g.Close(ctx); err != nil {
		return err
	}
	if err := g.Barrier().Wait(ctx); !errors.Is(err, comm.ErrClosed) {
		return fmt.Errorf("barrier after close: %v, want ErrClosed", err)
	}
	fmt.Printf("rank %d of %d via %s: ok\n", r, n, comm.TransportOf(g))
	return nil
}

func badInput() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := mpi.New(ctx, mpi.WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	r, n := g.Rank(), g.Size()
	for name, w := range map[string]comm.Work{
		"nil buffer":          g.AllReduce(nil, comm.Sum),
		"unknown op":          g.AllReduce(comm.F32{1}, comm.Op(99)),
		"root out of range":   g.Broadcast(comm.F32{1}, n),
		"short all-gather":    g.AllGather(make(comm.F32, 8), make(comm.F32, 3)),
		"dtypes differ":       g.AllGather(make(comm.F32, 8), make(comm.F64, 4)),
		"long reduce-scatter": g.ReduceScatter(make(comm.F32, 5), make(comm.F32, 8), comm.Sum),
		"send to self":        g.Send(comm.F32{1}, r, 0),
		"negative tag":        g.Recv(comm.F32{1}, 1-r, -1),
		"peer out of range":   g.Send(comm.F32{1}, n, 0),
	} {
		if err := w.Wait(ctx); !errors.Is(err, comm.ErrInvalid) {
			return fmt.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A message longer or shorter than the receive buffer.
	if r == 0 {
		long, short := g.Recv(make(comm.F32, 2), 1, 1), g.Recv(make(comm.F32, 8), 1, 2)
		for name, w := range map[string]comm.Work{"longer": long, "shorter": short} {
			if err := w.Wait(ctx); err == nil || !strings.Contains(err.Error(), "from rank 1 tag") {
				return fmt.Errorf("recv of a %s message: %v, want an error naming the peer", name, err)
			}
		}
	} else {
		if err := errors.Join(g.Send(make(comm.F32, 4), 0, 1).Wait(ctx), g.Send(make(comm.F32, 4), 0, 2).Wait(ctx)); err != nil {
			return err
		}
	}
	// A receive cancelled by its context, and one past its group's timeout, fail alone.
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = g.Recv(make(comm.F32, 4), 1-r, 7).Wait(wctx)
	wcancel()
	if !errors.Is(err, comm.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cancelled recv: %v, want ErrAborted and the context's error", err)
	}
	short, err := mpi.New(ctx, mpi.WithTimeout(200*time.Millisecond))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := short.Recv(make(comm.F32, 4), 1-r, 7).Wait(ctx); !errors.Is(err, comm.ErrTimeout) {
		return fmt.Errorf("recv past the timeout: %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		return fmt.Errorf("recv past a 200ms timeout took %v", took)
	}
	if err := short.Close(ctx); err != nil {
		return err
	}
	// The group still works.
	b := comm.F32{1}
	if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil || b[0] != float32(n) {
		return fmt.Errorf("all-reduce after the errors: %v %v", b, err)
	}
	if err := g.Close(ctx); err != nil {
		return err
	}
	if _, err := mpi.New(ctx); err == nil || !strings.Contains(err.Error(), "finalized") {
		return fmt.Errorf("New after the last Close: %v, want an error saying MPI was finalized", err)
	}
	fmt.Printf("rank %d: errors ok\n", r)
	return nil
}
