//go:build linux

package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func zeroCopies(g Group) int64 { return g.(*group).t.(*shmTransport).zeroCopies.Load() }

// TestZeroCopyAllReduce: buffers from AllocFloat32 on the shared-memory transport are
// all-reduced in place, for sub-slices at odd offsets and of odd lengths (one chunk, several,
// not divisible by the world size), world 2 to 5, every op: the result equals the reference
// (exactly for small integers), is bit-identical on every rank and equal to the staged path's
// on ordinary memory, and the zero-copy path was taken. A rank passing ordinary memory makes
// every rank fall back to the staged path, with the same result.
func TestZeroCopyAllReduce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	ctx := context.Background()
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			gs := shmMaker(t, n)
			const total = 3<<18 + 1000
			bufs := make([][]float32, n)
			noErrors(t, onAll(gs, func(g Group) error {
				var err error
				bufs[g.Rank()], err = AllocFloat32(ctx, g, total)
				return err
			}))
			for _, c := range []struct{ off, count int }{{0, total}, {13, 1<<18 + 5}, {3, 9000}, {5, 100003}, {total - 7*n - 3, 7*n + 3}} {
				for _, op := range []Op{Sum, Avg, Max, Min} {
					for _, integers := range []bool{true, false} {
						name := fmt.Sprintf("off%d/count%d/%v/int%v", c.off, c.count, op, integers)
						ins := make([][]float32, n)
						for r := range ins {
							ins[r] = input(r, c.count, integers)
						}
						want := reference(op, ins)
						tol := 1e-5
						if integers && op != Avg {
							tol = 0
						}
						before := zeroCopies(gs[0])
						staged := make([][]float32, n)
						noErrors(t, onAll(gs, func(g Group) error {
							r := g.Rank()
							b := bufs[r][c.off : c.off+c.count]
							copy(b, ins[r])
							staged[r] = slices.Clone(ins[r])
							return errors.Join(g.AllReduce(F32(b), op).Wait(ctx), g.AllReduce(F32(staged[r]), op).Wait(ctx))
						}))
						wantZero := int64(0) // small messages take the direct path
						if 4*c.count*(n-1) > gs[0].(*group).cfg.smallBytes {
							wantZero = 1
						}
						if got := zeroCopies(gs[0]) - before; got != wantZero {
							t.Fatalf("%s: %d zero-copy all-reduces, want %d", name, got, wantZero)
						}
						for r := range n {
							got := bufs[r][c.off : c.off+c.count]
							compare(t, name, r, got, want, tol)
							if !slices.Equal(got, bufs[0][c.off:c.off+c.count]) {
								t.Fatalf("%s: rank %d differs from rank 0", name, r)
							}
							if !slices.Equal(got, staged[r]) {
								t.Fatalf("%s: rank %d: zero-copy result differs from the staged one", name, r)
							}
						}
					}
				}
			}
			// Rank 0 passes ordinary memory: every rank takes the staged path.
			ins := make([][]float32, n)
			for r := range ins {
				ins[r] = input(r, 100003, true)
			}
			want := reference(Sum, ins)
			before := zeroCopies(gs[1])
			outs := make([][]float32, n)
			noErrors(t, onAll(gs, func(g Group) error {
				r := g.Rank()
				b := bufs[r][:100003]
				if r == 0 {
					b = make([]float32, 100003)
				}
				copy(b, ins[r])
				outs[r] = b
				return g.AllReduce(F32(b), Sum).Wait(ctx)
			}))
			if got := zeroCopies(gs[1]) - before; got != 0 {
				t.Fatalf("mixed buffers: %d zero-copy all-reduces, want 0", got)
			}
			for r := range n {
				compare(t, "mixed", r, outs[r], want, 0)
			}
		})
	}
}

// AllocFloat32 leaves no file behind in /dev/shm, keeps the memory usable after the group
// is closed, and gives ordinary memory on a transport without shared memory.
func TestAllocFloat32Lifetime(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector cannot see shared memory's synchronisation")
	}
	ctx := context.Background()
	pattern := filepath.Join(shmDir, fmt.Sprintf("%s%d-*", shmFilePrefix, os.Getpid()))
	gs := shmMaker(t, 2)
	bufs := make([][]float32, 2)
	noErrors(t, onAll(gs, func(g Group) error {
		var err error
		bufs[g.Rank()], err = AllocFloat32(ctx, g, 1<<20)
		return err
	}))
	if left, _ := filepath.Glob(pattern); len(left) > 0 {
		t.Errorf("files left in %s after allocation: %v", shmDir, left)
	}
	closeAll(gs)
	for r, b := range bufs {
		b[len(b)-1] = float32(r) // still mapped
	}
	for _, g := range localMaker(t, 2) {
		b, err := AllocFloat32(ctx, g, 10)
		if err != nil || len(b) != 10 {
			t.Fatalf("local group: %v, %d elements", err, len(b))
		}
	}
}
