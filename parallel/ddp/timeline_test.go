package ddp

import (
	"runtime"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// synthStep appends the events of one step of a made-up two-bucket DDP step to tl: forward
// 1 ms, backward 4 ms with bucket 0 reduced inside it (2 ms, all hidden) and bucket 1 after
// it (1 ms, none hidden), a wait and an optimizer step. Every duration is exact, so the
// summary of n steps is known.
func synthStep(tl *Timeline, step int, t0 time.Time) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(step*20+ms) * time.Millisecond) }
	tl.Add(Event{Name: EvForward, Step: step, Bucket: -1, Start: at(0), End: at(1)})
	tl.Add(Event{Name: EvGradient, Step: step, Bucket: -1, Param: "fc.weight", Start: at(1), End: at(1)})
	tl.Add(Event{Name: EvAllReduce, Step: step, Bucket: 0, Start: at(2), End: at(4)})
	tl.Add(Event{Name: EvGradient, Step: step, Bucket: -1, Param: "conv1.weight", Start: at(5), End: at(5)})
	// Backward is recorded after bucket 0's reduction, as the reducer does.
	tl.Add(Event{Name: EvBackward, Step: step, Bucket: -1, Start: at(1), End: at(5)})
	tl.Add(Event{Name: EvAllReduce, Step: step, Bucket: 1, Start: at(5), End: at(6)})
	tl.Add(Event{Name: EvWait, Step: step, Bucket: -1, Start: at(5), End: at(6)})
	tl.Add(Event{Name: EvOptimizer, Step: step, Bucket: -1, Start: at(6), End: at(9)})
}

// The ring shows exactly the last N steps, and the summary covers every step whatever N.
func TestTimelineRing(t *testing.T) {
	const steps = 50
	t0 := time.Unix(1_700_000_000, 0)
	want := Summary{Steps: steps, Buckets: 2, Forward: steps * time.Millisecond,
		Backward: 4 * steps * time.Millisecond, Optimizer: 3 * steps * time.Millisecond,
		AllReduce: 3 * steps * time.Millisecond, Hidden: 2 * steps * time.Millisecond,
		Wait: steps * time.Millisecond, OverlapFraction: 2.0 / 3, FirstLaunchBeforeLastGradient: true}
	for _, tc := range []struct {
		name      string
		tl        *Timeline
		wantSteps int // steps whose events Events returns
	}{
		{"off", NewTimeline(3, TimelineSteps(0)), 0},
		{"negative is off", NewTimeline(3, TimelineSteps(-5)), 0},
		{"one step", NewTimeline(3, TimelineSteps(1)), 1},
		{"ten steps", NewTimeline(3, TimelineSteps(10)), 10},
		{"more than the run", NewTimeline(3, TimelineSteps(1000)), steps},
		{"default", NewTimeline(3), min(steps, DefaultTimelineSteps)},
		{"zero value", &Timeline{rank: 3}, min(steps, DefaultTimelineSteps)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for s := range steps {
				synthStep(tc.tl, s, t0)
			}
			evs := tc.tl.Events()
			if len(evs) != 8*tc.wantSteps {
				t.Fatalf("%d events, want %d (8 for each of the last %d steps)", len(evs), 8*tc.wantSteps, tc.wantSteps)
			}
			for i, e := range evs {
				if e.Step < steps-tc.wantSteps || e.Rank != 3 {
					t.Fatalf("event %d: %+v, want only steps >= %d of rank 3", i, e, steps-tc.wantSteps)
				}
				if i > 0 && e.Start.Before(evs[i-1].Start) {
					t.Fatalf("event %d starts before event %d", i, i-1)
				}
			}
			if got := tc.tl.Summary(); got != want {
				t.Errorf("summary\n got %+v\nwant %+v", got, want)
			}
			tc.tl.Reset()
			if got := tc.tl.Summary(); got != (Summary{}) || len(tc.tl.Events()) != 0 {
				t.Errorf("after Reset: summary %+v, %d events; want none", got, len(tc.tl.Events()))
			}
		})
	}
}

// A step whose bucket 0 is reduced after its last gradient clears FirstLaunchBeforeLastGradient
// even once that step has left the ring.
func TestTimelineLateLaunchSurvivesRing(t *testing.T) {
	tl := NewTimeline(0, TimelineSteps(2))
	t0 := time.Unix(1_700_000_000, 0)
	tl.Add(Event{Name: EvGradient, Step: 0, Bucket: -1, Start: t0, End: t0})
	tl.Add(Event{Name: EvAllReduce, Step: 0, Bucket: 0, Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Millisecond)})
	for s := 1; s < 10; s++ {
		synthStep(tl, s, t0)
	}
	if s := tl.Summary(); s.FirstLaunchBeforeLastGradient || s.Steps != 9 {
		t.Fatalf("summary %+v: want FirstLaunchBeforeLastGradient false (step 0) and 9 steps with backward", s)
	}
}

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
