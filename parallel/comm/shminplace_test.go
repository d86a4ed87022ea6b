//go:build linux

package comm

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// TestInPlace: InPlace says true exactly for the all-reduces that take the zero-copy path:
// sub-slices of AllocFloat32 memory above the small-message size, world 2 and 3; false for
// ordinary memory and for slices small enough for the direct path.
func TestInPlace(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	ctx := context.Background()
	for n := 2; n <= 3; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			gs := shmMaker(t, n)
			const total = 1 << 18
			bufs := make([][]float32, n)
			noErrors(t, onAll(gs, func(g Group) error {
				var err error
				bufs[g.Rank()], err = AllocFloat32(ctx, g, total)
				return err
			}))
			small := gs[0].(*group).cfg.smallBytes / 4 / (n - 1)
			for _, c := range []struct {
				off, count int
				shared     bool
			}{{0, total, true}, {7, small + 1, true}, {7, small, true}, {0, total, false}} {
				name := fmt.Sprintf("off%d/count%d/shared%v", c.off, c.count, c.shared)
				before := zeroCopies(gs[0])
				said := make([]bool, n)
				noErrors(t, onAll(gs, func(g Group) error {
					b := make([]float32, c.count)
					if c.shared {
						b = bufs[g.Rank()][c.off : c.off+c.count]
					}
					said[g.Rank()] = InPlace(g, b)
					return g.AllReduce(F32(b), Avg).Wait(ctx)
				}))
				took := zeroCopies(gs[0]) - before
				for r, s := range said {
					if s != (took == 1) {
						t.Fatalf("%s: rank %d: InPlace %v, zero-copy all-reduces %d", name, r, s, took)
					}
				}
			}
		})
	}
}

// BenchmarkInPlaceAvg: world 2 in one process, resnet18's gradient buckets (2, 27.5, 13.7 and
// 1.5 MiB) in shared memory: each rank divides its buffer by the world size and all-reduces
// with Sum (DDP's order before Note [Division in place]), against an Avg in place. Reports
// the process's CPU time per op beside the wall time, as the ranks share the machine's cores.
func BenchmarkInPlaceAvg(b *testing.B) {
	if raceEnabled {
		b.Skip("the race detector cannot see shared memory's synchronisation")
	}
	ctx := context.Background()
	gs := shmMaker(b, 2)
	sizes := []int{514 << 10, 7214 << 10, 3584 << 10, 380 << 10} // float32s per bucket
	total := 0
	for _, s := range sizes {
		total += s
	}
	bufs := make([][]float32, 2)
	noErrors(b, onAll(gs, func(g Group) error {
		var err error
		bufs[g.Rank()], err = AllocFloat32(ctx, g, total)
		return err
	}))
	for _, avg := range []bool{false, true} {
		name := "divide-then-Sum"
		if avg {
			name = "Avg-in-place"
		}
		b.Run(name, func(b *testing.B) {
			cpu0 := benchutil.CPUSeconds()
			for range b.N {
				noErrors(b, onAll(gs, func(g Group) error {
					buf := bufs[g.Rank()]
					lo := 0
					for _, s := range sizes {
						x := buf[lo : lo+s]
						lo += s
						op := Avg
						if !avg {
							divideBlock(F32(x).bytes(), 2)
							op = Sum
						}
						if err := g.AllReduce(F32(x), op).Wait(ctx); err != nil {
							return err
						}
					}
					return nil
				}))
			}
			b.ReportMetric((benchutil.CPUSeconds()-cpu0)*1e3/float64(b.N), "cpu-ms/op")
		})
	}
}
