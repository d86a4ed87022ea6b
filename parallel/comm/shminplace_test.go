//go:build linux

package comm

import (
	"context"
	"fmt"
	"testing"
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
