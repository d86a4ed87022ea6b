package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/mpi"
)

func init() { scenarios["rings"] = rings }

// The package's ring reduce-scatter, ring all-gather, chain broadcast and ring all-reduce
// (Note [Ring over MPI messages]), at world 2 and 3, with the threshold lowered to 1 byte
// so that every non-empty buffer takes them (one job per world, to keep the package's test
// time): exact results on integer-valued floats, lengths that the world does not divide
// (some ranks' segments empty), buffers that overlap, and random floats whose results
// carry the same bits on every rank and match between the collectives. Then ranks that
// call a ring collective with different lengths, roots or collectives all fail it with
// comm.ErrMismatch naming every rank's call, and the group goes on.
func TestRings(t *testing.T) {
	requireMPI(t)
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("world%d", np), func(t *testing.T) {
			j := mpirun(t, np, "rings", 60*time.Second)
			for r := range np {
				for _, want := range []string{fmt.Sprintf("rank %d of %d: rings ok", r, np), fmt.Sprintf("rank %d of %d: mismatch ok", r, np)} {
					if j.err != nil || !strings.Contains(j.out, want) {
						t.Fatalf("want %q: %v\n%s", want, j.err, j.out)
					}
				}
			}
		})
	}
}

// ringSizes are element counts for the ring tests: empty (OpenMPI's collectives: below any
// threshold), fewer than the ranks, not divisible by 2 or 3, and 300001 float32s, which
// the chain broadcast sends in 10 pieces.
var ringSizes = []int{0, 1, 2, 7, 1001, 300001}

// fold reduces input(q, i) over q in [0,n) with op, as the test's reference.
func fold(op comm.Op, n, i int) float64 {
	v := input(0, i)
	for q := 1; q < n; q++ {
		switch x := input(q, i); op {
		case comm.Max:
			v = max(v, x)
		case comm.Min:
			v = min(v, x)
		default:
			v += x
		}
	}
	if op == comm.Avg {
		v /= float64(n)
	}
	return v
}

// foldInt is fold for int64 (Avg truncates toward zero, as comm's).
func foldInt(op comm.Op, n, i int) int64 {
	if op != comm.Avg {
		return int64(fold(op, n, i))
	}
	return int64(fold(comm.Sum, n, i)) / int64(n)
}

func rings() error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	g, err := mpi.New(ctx, mpi.WithTimeout(40*time.Second), mpi.WithRingBytes(1))
	if err != nil {
		return err
	}
	n, r := g.Size(), g.Rank()
	for _, size := range ringSizes {
		lo, hi := comm.ShardRange(size, n, r)
		// Reduce-scatter: every op and dtype, out of place, dst = src's own shard, and dst
		// overlapping src elsewhere (received aside).
		for _, op := range []comm.Op{comm.Sum, comm.Avg, comm.Max, comm.Min} {
			for _, place := range []string{"apart", "own shard", "shifted"} {
				f32, f64, i64 := make(comm.F32, size), make(comm.F64, size), make(comm.I64, size)
				for i := range size {
					f32[i], f64[i], i64[i] = float32(input(r, i)), input(r, i), int64(input(r, i))
				}
				d32, d64, di64 := make(comm.F32, hi-lo), make(comm.F64, hi-lo), make(comm.I64, hi-lo)
				switch {
				case place == "own shard":
					d32, d64, di64 = f32[lo:hi], f64[lo:hi], i64[lo:hi]
				case place == "shifted" && hi-lo > 0 && lo > 0:
					d32, d64, di64 = f32[lo-1:hi-1], f64[lo-1:hi-1], i64[lo-1:hi-1]
				}
				for _, w := range []comm.Work{g.ReduceScatter(d32, f32, op), g.ReduceScatter(d64, f64, op), g.ReduceScatter(di64, i64, op)} {
					if err := w.Wait(ctx); err != nil {
						return fmt.Errorf("reduce-scatter %v x %d (%s): %w", op, size, place, err)
					}
				}
				for i := range hi - lo {
					w := fold(op, n, lo+i)
					if d32[i] != float32(w) || d64[i] != w || di64[i] != foldInt(op, n, lo+i) {
						return fmt.Errorf("reduce-scatter %v x %d (%s): element %d: %v %v %v, want %v %v %v",
							op, size, place, lo+i, d32[i], d64[i], di64[i], float32(w), w, foldInt(op, n, lo+i))
					}
				}
			}
			// All-reduce: the ring reduce-scatter in place, then the ring all-gather.
			b := make(comm.F64, size)
			for i := range b {
				b[i] = input(r, i)
			}
			if err := g.AllReduce(b, op).Wait(ctx); err != nil {
				return fmt.Errorf("all-reduce %v x %d: %w", op, size, err)
			}
			for i := range b {
				if b[i] != fold(op, n, i) {
					return fmt.Errorf("all-reduce %v x %d: element %d: %v, want %v", op, size, i, b[i], fold(op, n, i))
				}
			}
		}
		// All-gather: float32 and a 16-bit dtype, src apart, in place, and overlapping dst
		// elsewhere.
		for _, place := range []string{"apart", "in place", "shifted"} {
			d32, d16 := make(comm.F32, size), make(comm.BF16, size)
			s32, s16 := make(comm.F32, hi-lo), make(comm.BF16, hi-lo)
			switch {
			case place == "in place":
				s32, s16 = d32[lo:hi], d16[lo:hi]
			case place == "shifted" && hi < size:
				s32, s16 = d32[lo+1:hi+1], d16[lo+1:hi+1]
			}
			for i := range s32 {
				s32[i], s16[i] = float32(input(r, lo+i)), uint16(0x8000+1000*r+lo+i)
			}
			if err := errors.Join(g.AllGather(d32, s32).Wait(ctx), g.AllGather(d16, s16).Wait(ctx)); err != nil {
				return fmt.Errorf("all-gather x %d (%s): %w", size, place, err)
			}
			for q := range n {
				qlo, qhi := comm.ShardRange(size, n, q)
				for i := qlo; i < qhi; i++ {
					if d32[i] != float32(input(q, i)) || d16[i] != uint16(0x8000+1000*q+i) {
						return fmt.Errorf("all-gather x %d (%s): element %d: %v %#x, want %v %#x", size, place, i, d32[i], d16[i], input(q, i), 0x8000+1000*q+i)
					}
				}
			}
		}
		// Broadcast from every root, a float and a 16-bit dtype.
		for root := range n {
			b32, b16 := make(comm.F32, size), make(comm.F16, size)
			for i := range b32 {
				b32[i], b16[i] = float32(input(r, i)), uint16(r*7+i)
			}
			if err := errors.Join(g.Broadcast(b32, root).Wait(ctx), g.Broadcast(b16, root).Wait(ctx)); err != nil {
				return fmt.Errorf("broadcast x %d from %d: %w", size, root, err)
			}
			for i := range b32 {
				if b32[i] != float32(input(root, i)) || b16[i] != uint16(root*7+i) {
					return fmt.Errorf("broadcast x %d from %d: element %d: %v %d, want %v %d", size, root, i, b32[i], b16[i], input(root, i), root*7+i)
				}
			}
		}
	}
	if err := sameBits(ctx, g); err != nil {
		return err
	}
	fmt.Printf("rank %d of %d: rings ok\n", r, n)
	if err := mismatch(ctx, g); err != nil {
		return err
	}
	if err := g.Close(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d of %d: mismatch ok\n", r, n)
	return nil
}

// sameBits checks random float sums: the ring all-reduce leaves the same bits on every
// rank, twice in a row; its segment r is bit for bit rank r's ring reduce-scatter; the
// all-gather of those shards is the all-reduce again; a broadcast of it changes nothing.
func sameBits(ctx context.Context, g comm.Group) error {
	n, r := g.Size(), g.Rank()
	const size = 100003
	lo, hi := comm.ShardRange(size, n, r)
	rng := rand.New(rand.NewSource(int64(r) + 1))
	x := make(comm.F32, size)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(7)-3)))
	}
	a1, a2, shard, gathered := slices.Clone(x), slices.Clone(x), make(comm.F32, hi-lo), make(comm.F32, size)
	for _, w := range []comm.Work{g.AllReduce(a1, comm.Sum), g.AllReduce(a2, comm.Sum), g.ReduceScatter(shard, x, comm.Sum)} {
		if err := w.Wait(ctx); err != nil {
			return fmt.Errorf("random floats: %w", err)
		}
	}
	if err := g.AllGather(gathered, shard).Wait(ctx); err != nil {
		return fmt.Errorf("random floats: %w", err)
	}
	bits := func(v comm.F32) []uint32 {
		out := make([]uint32, len(v))
		for i, f := range v {
			out[i] = math.Float32bits(f)
		}
		return out
	}
	if !slices.Equal(bits(a1), bits(a2)) {
		return errors.New("random floats: two all-reduces of the same input differ")
	}
	if !slices.Equal(bits(a1[lo:hi]), bits(shard)) {
		return fmt.Errorf("random floats: rank %d's reduce-scatter shard differs from its all-reduce's segment", r)
	}
	if !slices.Equal(bits(a1), bits(gathered)) {
		return errors.New("random floats: the all-gather of the reduce-scatter shards differs from the all-reduce")
	}
	// Every rank's all-reduce has the same bits as rank 0's, which the chain broadcast sends.
	b := slices.Clone(a1)
	if err := g.Broadcast(b, 0).Wait(ctx); err != nil {
		return fmt.Errorf("random floats: %w", err)
	}
	if !slices.Equal(bits(a1), bits(b)) {
		return fmt.Errorf("random floats: rank %d's all-reduce differs from rank 0's", r)
	}
	// The sums are rounded, so they are checked against the float64 sum of every rank's
	// input (each rank regenerates the others' from their seeds) within the rounding of n-1
	// float32 additions: each errs by at most half an ulp of its result, which is at most
	// sum|x| (2^-24 relative), so the error is at most (n-1) sum|x| 2^-24. A segment reduced
	// twice, never, or with the wrong rank's data is far outside it.
	ref, abs := make(comm.F64, size), make(comm.F64, size)
	for q := range n {
		rq := rand.New(rand.NewSource(int64(q) + 1))
		for i := range ref {
			v := float64(float32(rq.NormFloat64() * math.Pow(10, float64(rq.Intn(7)-3))))
			ref[i] += v
			abs[i] += math.Abs(v)
		}
	}
	for i := range ref {
		if tol := float64(n-1) * abs[i] * 0x1p-24; math.Abs(float64(a1[i])-ref[i]) > tol {
			return fmt.Errorf("random floats: element %d: %v, want %v within %g", i, a1[i], ref[i], tol)
		}
	}
	return nil
}

// mismatch has the last rank call each ring collective with one element more, another
// root or another collective than the others; every rank must fail it with ErrMismatch.
func mismatch(ctx context.Context, g comm.Group) error {
	n, r := g.Size(), g.Rank()
	last := n - 1
	more := func(k int) int {
		if r == last {
			return k + 1
		}
		return k
	}
	cases := []struct {
		name string
		work func() comm.Work
		want []string // in every rank's error
	}{
		{"reduce-scatter length", func() comm.Work {
			src := make(comm.F32, more(100))
			lo, hi := comm.ShardRange(len(src), n, r)
			return g.ReduceScatter(make(comm.F32, hi-lo), src, comm.Sum)
		}, []string{"rank 0 runs reduce-scatter of 100 float32 (sum)", fmt.Sprintf("rank %d runs reduce-scatter of 101 float32 (sum)", last)}},
		{"all-gather length", func() comm.Work {
			dst := make(comm.F64, more(100))
			lo, hi := comm.ShardRange(len(dst), n, r)
			return g.AllGather(dst, make(comm.F64, hi-lo))
		}, []string{"rank 0 runs all-gather of 100 float64", fmt.Sprintf("rank %d runs all-gather of 101 float64", last)}},
		{"all-reduce length", func() comm.Work { return g.AllReduce(make(comm.I64, more(100)), comm.Max) },
			[]string{"rank 0 runs all-reduce of 100 int64 (max)", fmt.Sprintf("rank %d runs all-reduce of 101 int64 (max)", last)}},
		{"broadcast root", func() comm.Work { return g.Broadcast(make(comm.F32, 100), more(0)) },
			[]string{"rank 0 runs broadcast of 100 float32 from rank 0", fmt.Sprintf("rank %d runs broadcast of 100 float32 from rank 1", last)}},
		{"collective", func() comm.Work {
			if r == last {
				return g.Broadcast(make(comm.F32, 100), 0)
			}
			return g.AllReduce(make(comm.F32, 100), comm.Sum)
		}, []string{"rank 0 runs all-reduce of 100 float32 (sum)", fmt.Sprintf("rank %d runs broadcast of 100 float32 from rank 0", last)}},
	}
	for _, c := range cases {
		err := c.work().Wait(ctx)
		ok := errors.Is(err, comm.ErrMismatch) && strings.HasPrefix(err.Error(), fmt.Sprintf("rank %d: ", r))
		for _, w := range c.want {
			ok = ok && strings.Contains(err.Error(), w)
		}
		if !ok {
			return fmt.Errorf("%s: %v, want ErrMismatch from rank %d saying %q", c.name, err, r, c.want)
		}
		// The group goes on.
		b := make(comm.F32, 100)
		b[0] = 1
		if err := g.AllReduce(b, comm.Sum).Wait(ctx); err != nil || b[0] != float32(n) {
			return fmt.Errorf("all-reduce after the %s mismatch: %v %v", c.name, b[0], err)
		}
	}
	return nil
}
