package timeline

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// synthStep appends the events of one made-up two-bucket DDP step to tl: forward
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
		{"off", New(3, 0), 0},
		{"negative is off", New(3, -5), 0},
		{"one step", New(3, 1), 1},
		{"ten steps", New(3, 10), 10},
		{"more than the run", New(3, 1000), steps},
		{"default", New(3, DefaultSteps), min(steps, DefaultSteps)},
		{"zero value", &Timeline{rank: 3}, min(steps, DefaultSteps)},
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
	tl := New(0, 2)
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

// update rewrites testdata's traces from the current writer: go test -run TestChromeTraceGolden -update.
var update = flag.Bool("update", false, "rewrite testdata/*.json from the current Chrome trace writer")

// The Chrome traces of two ranks and their merge are byte for byte the files in testdata,
// so that the format traces are read in does not drift (rank 1's clock runs 1 ms late, the
// ring keeps 3 of 5 steps, and each step begins with a broadcast of buffers).
func TestChromeTraceGolden(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var traces []*bytes.Buffer
	for r := range 2 {
		tl := New(r, 3)
		for s := range 5 {
			at := t0.Add(time.Duration(s*20+r) * time.Millisecond)
			tl.Add(Event{Name: EvBuffers, Step: s, Bucket: -1, Start: at.Add(-time.Millisecond), End: at})
			synthStep(tl, s, t0.Add(time.Duration(r)*time.Millisecond))
		}
		var b bytes.Buffer
		if err := tl.WriteChromeTrace(&b); err != nil {
			t.Fatal(err)
		}
		traces = append(traces, &b)
	}
	var merged bytes.Buffer
	if err := MergeChromeTraces(&merged, bytes.NewReader(traces[0].Bytes()), bytes.NewReader(traces[1].Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		got  []byte
	}{
		{"rank0.json", traces[0].Bytes()},
		{"rank1.json", traces[1].Bytes()},
		{"merged.json", merged.Bytes()},
	} {
		path := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(path, tc.got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tc.got, want) {
			t.Errorf("%s differs from testdata/%s:\n got %s\nwant %s", tc.file, tc.file, tc.got, want)
		}
	}
}

// A trace that is not JSON is an error naming its position among the inputs.
func TestMergeChromeTracesBadInput(t *testing.T) {
	var tr bytes.Buffer
	if err := New(0, 1).WriteChromeTrace(&tr); err != nil {
		t.Fatal(err)
	}
	err := MergeChromeTraces(&bytes.Buffer{}, &tr, bytes.NewReader([]byte("not json")))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("trace 1")) {
		t.Fatalf("MergeChromeTraces of a bad second trace: %v, want an error naming trace 1", err)
	}
}
