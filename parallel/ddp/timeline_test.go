package ddp

import (
	"runtime"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// 2,000 DDP steps of a small convnet at world 2: the live heap after the ring has filled
// stays flat (measured: +9 KiB over 1,700 steps, against +13.6 MiB, 8 KB a step, when the
// ring is made larger than the run), and each rank's timeline holds exactly the last N steps.
func TestTimelineHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 steps")
	}
	const (
		world, per = 2, 2
		keep       = 50
		warm       = 300  // steps before the first measurement: the ring is full, pools are warm
		total      = 2000 // steps in all
		// The live heap may grow by this much between step warm and step total: noise of
		// the runtime and the test's own bookkeeping.
		bound = 256 << 10
	)
	c := newCluster(t, comm.NewLocalGroups(world), true, per, BucketCapBytes(256), FirstBucketBytes(64), TimelineSteps(keep))
	if err := c.train(warm, per, 1); err != nil {
		t.Fatal(err)
	}
	before := liveHeap()
	if err := c.train(total-warm, per, 1); err != nil {
		t.Fatal(err)
	}
	after := liveHeap()
	growth := int64(after) - int64(before)
	t.Logf("live heap after %d steps %.1f KiB, after %d steps %.1f KiB: %+.1f KiB (%.1f B/step), bound %d KiB",
		warm, float64(before)/1024, total, float64(after)/1024, float64(growth)/1024, float64(growth)/float64(total-warm), bound>>10)
	if growth > bound {
		t.Errorf("live heap grew by %d bytes over %d steps, bound %d", growth, total-warm, bound)
	}
	for r, d := range c.ddps {
		tl := d.Timeline()
		seen := map[int]bool{}
		for _, e := range tl.Events() {
			seen[e.Step] = true
		}
		lo, hi := total, -1
		for s := range seen {
			lo, hi = min(lo, s), max(hi, s)
		}
		if len(seen) != keep || hi-lo+1 != keep {
			t.Errorf("rank %d: timeline holds %d steps (%d..%d), want the last %d", r, len(seen), lo, hi, keep)
		}
		if s := tl.Summary(); s.Steps != total {
			t.Errorf("rank %d: summary covers %d steps, want all %d", r, s.Steps, total)
		}
	}
}

// liveHeap is the heap in use after several collections (finalizers and sweeps settle).
func liveHeap() uint64 {
	var ms runtime.MemStats
	for range 4 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
