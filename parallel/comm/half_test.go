package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// halfFormat is one 16-bit format with its conversions and unit roundoff (half an ulp at 1).
type halfFormat struct {
	name   string
	buf    func([]uint16) Buffer
	narrow func(float32) uint16
	widen  func(uint16) float32
	u      float64
}

var halfFormats = []halfFormat{
	{"bf16", func(b []uint16) Buffer { return BF16(b) }, simd.BF16FromF32, simd.BF16ToF32One, 1.0 / 256},
	{"f16", func(b []uint16) Buffer { return F16(b) }, simd.F16FromF32, simd.F16ToF32One, 1.0 / 2048},
}

// TestHalfCollectives: all-reduce, reduce-scatter, all-gather and broadcast of BF16 and F16
// buffers over every transport (in-process, TCP on loopback, shared memory, hierarchical),
// world sizes 2-4, sizes that take the direct, ring and staged paths.
//
// Integer inputs in [-25, 25] keep every partial sum exact in both formats (|sum| <= 100 <
// 256), so Sum, Max and Min must be exact; Avg is the exact mean rounded once more (within
// one unit roundoff of it). Random inputs in [-1, 1] are checked against the float64 sum of
// the rounded inputs within n-1 roundings of partial sums of magnitude <= n plus the final
// one (n·n·u absolute). All-reduce results are bit-identical on every rank; all-gather and
// broadcast move bits unchanged.
func TestHalfCollectives(t *testing.T) {
	makers := []struct {
		name string
		mk   groupMaker
	}{{"local", localMaker}, {"tcp", tcpMaker}, {"shm", shmMaker}, {"hier", hierMaker(2, 2)}}
	for _, m := range makers {
		for _, n := range []int{2, 3, 4} {
			if m.name == "hier" && n != 4 {
				continue
			}
			if m.name == "shm" && raceEnabled {
				continue // the race detector cannot see shared memory's synchronisation
			}
			t.Run(fmt.Sprintf("%s/%d", m.name, n), func(t *testing.T) {
				gs := m.mk(t, n, WithChunkBytes(4096), WithSmallBytes(1024), WithStreams(2))
				for _, f := range halfFormats {
					checkHalf(t, gs, f)
				}
			})
		}
	}
}

func checkHalf(t *testing.T, gs []Group, f halfFormat) {
	n := len(gs)
	ctx := context.Background()
	for _, count := range []int{0, 1, n - 1, 7*n + 3, 20011} {
		for _, op := range []Op{Sum, Avg, Max, Min} {
			for _, integers := range []bool{true, false} {
				name := fmt.Sprintf("%s/n%d/count%d/%v/int%v", f.name, n, count, op, integers)
				ins := make([][]uint16, n)
				rounded := make([][]float32, n)
				for r := range ins {
					x := input(r, count, false)
					ins[r], rounded[r] = make([]uint16, count), make([]float32, count)
					for i, v := range x {
						if integers {
							v = float32(math.Round(float64(v) * 25))
						}
						ins[r][i] = f.narrow(v)
						rounded[r][i] = f.widen(ins[r][i])
					}
				}
				want := reference(op, rounded)
				tol := float64(n*n) * f.u
				if integers {
					tol = 0
					if op == Avg {
						tol = f.u // relative to max(1, |want|): one rounding of the mean
					}
				}
				ar := make([][]uint16, n)
				rs := make([][]uint16, n)
				noErrors(t, onAll(gs, func(g Group) error {
					r := g.Rank()
					ar[r] = slices.Clone(ins[r])
					lo, hi := ShardRange(count, n, r)
					rs[r] = make([]uint16, hi-lo)
					w1 := g.AllReduce(f.buf(ar[r]), op)
					w2 := g.ReduceScatter(f.buf(rs[r]), f.buf(ins[r]), op)
					return errors.Join(w1.Wait(ctx), w2.Wait(ctx))
				}))
				for r := range n {
					if !slices.Equal(ar[r], ar[0]) {
						t.Fatalf("%s: rank %d all-reduce differs bitwise from rank 0", name, r)
					}
					compare(t, name+"/allreduce", r, widenAll(f, ar[r]), want, tol)
					lo, hi := ShardRange(count, n, r)
					compare(t, name+"/reducescatter", r, widenAll(f, rs[r]), want[lo:hi], tol)
				}
			}
		}
		full := make([]uint16, count)
		for i, v := range input(99, count, false) {
			full[i] = f.narrow(v)
		}
		ag := make([][]uint16, n)
		bc := make([][]uint16, n)
		root := count % n
		noErrors(t, onAll(gs, func(g Group) error {
			r := g.Rank()
			lo, hi := ShardRange(count, n, r)
			ag[r], bc[r] = make([]uint16, count), make([]uint16, count)
			if r == root {
				copy(bc[r], full)
			}
			w1 := g.AllGather(f.buf(ag[r]), f.buf(slices.Clone(full[lo:hi])))
			w2 := g.Broadcast(f.buf(bc[r]), root)
			return errors.Join(w1.Wait(ctx), w2.Wait(ctx))
		}))
		for r := range n {
			if !slices.Equal(ag[r], full) || !slices.Equal(bc[r], full) {
				t.Fatalf("%s n%d count%d: rank %d all-gather or broadcast changed the bits", f.name, n, count, r)
			}
		}
	}
}

func widenAll(f halfFormat, h []uint16) []float32 {
	x := make([]float32, len(h))
	for i, v := range h {
		x[i] = f.widen(v)
	}
	return x
}

// TestReduceHalfRoundsOnce: a k-input reduction of 16-bit values rounds once, after summing
// in float32 (1 + 3·2⁻⁹ is not a bfloat16, but the sum of 1 and three 2⁻⁹ rounds once to
// 1 + 2⁻⁷, where rounding after each addition would give 1 every time), and reduceN takes
// that path for every input count.
func TestReduceHalfRoundsOnce(t *testing.T) {
	one, eps := simd.BF16FromF32(1), simd.BF16FromF32(1.0/512)
	for k := 2; k <= 6; k++ {
		ins := [][]byte{asBytes([]uint16{one})}
		for range k - 1 {
			ins = append(ins, asBytes([]uint16{eps}))
		}
		out := make([]uint16, 1)
		reduceN(BFloat16, Sum, asBytes(out), ins, make([]byte, 64))
		want := float32(1 + float64(k-1)/512)
		if got, w := simd.BF16ToF32One(out[0]), simd.BF16ToF32One(simd.BF16FromF32(want)); got != w {
			t.Fatalf("k=%d: sum %v, want %v (one rounding of %v)", k, got, w, want)
		}
	}
}

func asBytes(b []uint16) []byte { return u16Bytes(b) }
