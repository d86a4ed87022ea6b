package comm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// hierMaker builds in-process hierarchical groups: hosts[h] ranks on fake host h, the hosts'
// ranks contiguous, each host's ranks joined by their own in-process network (standing in
// for shared memory) and all ranks by another (standing in for TCP).
func hierMaker(hosts ...int) groupMaker {
	return func(t testing.TB, n int, opts ...Option) []Group {
		cfg := newConfig(opts)
		global := NewLocalNetwork(n, opts...)
		first := []int{0}
		for _, l := range hosts {
			first = append(first, first[len(first)-1]+l)
		}
		if first[len(hosts)] != n {
			t.Fatalf("hosts %v do not add up to %d ranks", hosts, n)
		}
		gs := make([]Group, n)
		for h, l := range hosts {
			var ln *LocalNetwork
			if l > 1 {
				ln = NewLocalNetwork(l, WithStreams(1))
			}
			for i := range l {
				r := first[h] + i
				g := newGroup(global.Transport(r), cfg)
				var lt Transport
				if ln != nil {
					lt = ln.Transport(i)
					g.onClose = append(g.onClose, func() error { return lt.Close(context.Background()) })
				}
				g.attachHier(first, lt)
				gs[r] = g
			}
		}
		t.Cleanup(func() { closeAll(gs) })
		return gs
	}
}

// Every collective, op and size (0, 1, odd, large) on hierarchical layouts: even and uneven
// hosts, hosts of one rank, one host alone. Exact for integer inputs, 1e-5 for random floats
// (see checkCollectives), all-reduce bit-identical on every rank. Small chunks, so that
// buffers are cut into many pipeline pieces and the rings run several chunks per step.
func TestHierCollectives(t *testing.T) {
	for _, hosts := range [][]int{{2, 2}, {2, 1}, {1, 3}, {3, 1, 2}, {1, 1}, {3}} {
		n := 0
		for _, l := range hosts {
			n += l
		}
		t.Run(fmt.Sprint(hosts), func(t *testing.T) {
			t.Parallel()
			checkCollectives(t, hierMaker(hosts...), n, WithChunkBytes(4096), WithSmallBytes(1024), WithStreams(2))
		})
	}
}

// The hierarchical sum is a fixed function of the layout: two runs give the same bits on
// every rank, for float32, float64 and int64, and broadcast works from every root.
func TestHierDeterministicAndRoots(t *testing.T) {
	const count = 30011
	gs := hierMaker(2, 1, 2)(t, 5, WithChunkBytes(4096), WithSmallBytes(1024))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := TransportOf(gs[0]); got != "hier" {
		t.Fatalf("TransportOf = %q, want hier", got)
	}
	run := func() [][]float64 {
		out := make([][]float64, len(gs))
		noErrors(t, onAll(gs, func(g Group) error {
			r := g.Rank()
			f32 := input(r, count, false)
			f64 := make([]float64, count)
			i64 := make([]int64, count)
			for i, v := range f32 {
				f64[i], i64[i] = float64(v)/3, int64(v*1e6)
			}
			if err := g.AllReduce(F32(f32), Sum).Wait(ctx); err != nil {
				return err
			}
			if err := g.AllReduce(F64(f64), Avg).Wait(ctx); err != nil {
				return err
			}
			if err := g.AllReduce(I64(i64), Sum).Wait(ctx); err != nil {
				return err
			}
			for i := range f32 {
				f64 = append(f64, float64(f32[i]), float64(i64[i]))
			}
			out[r] = f64
			return nil
		}))
		return out
	}
	a, b := run(), run()
	for r := range gs {
		if !slices.Equal(a[r], a[0]) || !slices.Equal(b[r], a[0]) {
			t.Fatalf("rank %d: results differ bitwise from rank 0's or from the first run", r)
		}
	}
	for root := range gs {
		bufs := make([][]float32, len(gs))
		noErrors(t, onAll(gs, func(g Group) error {
			bufs[g.Rank()] = make([]float32, count)
			if g.Rank() == root {
				copy(bufs[root], input(root, count, false))
			}
			return g.Broadcast(F32(bufs[g.Rank()]), root).Wait(ctx)
		}))
		for r := range gs {
			if !slices.Equal(bufs[r], bufs[root]) || math.IsNaN(float64(bufs[r][0])) {
				t.Fatalf("broadcast from %d: rank %d differs", root, r)
			}
		}
	}
}

// Host layouts from GROUP_RANK: contiguous hosts give first, interleaved ones nil; the
// automatic choice wants several hosts with several ranks on one.
func TestHierLayoutChoice(t *testing.T) {
	for _, c := range []struct {
		first     []int
		mode      string
		use, fail bool
	}{
		{[]int{0, 2, 4}, "auto", true, false},
		{[]int{0, 1, 2}, "auto", false, false}, // one rank per host: flat TCP
		{[]int{0, 4}, "auto", false, false},    // one host
		{nil, "auto", false, false},            // not contiguous
		{nil, "on", false, true},
		{[]int{0, 1, 2}, "on", true, false},
	} {
		use, err := useHierarchy(c.mode, c.first, launchenv.Env{})
		if use != c.use || (err != nil) != c.fail {
			t.Errorf("useHierarchy(%s, %v) = %v, %v", c.mode, c.first, use, err)
		}
	}
}
