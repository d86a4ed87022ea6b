package ddp

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Event kinds recorded in a Timeline.
const (
	EvForward   = "forward"           // start of the step to the first gradient (see Timeline)
	EvBackward  = "backward"          // first gradient to the end of the tape
	EvGradient  = "gradient"          // one parameter's gradient arrived (an instant)
	EvAllReduce = "all-reduce"        // one bucket's reduction, launch to completion
	EvWait      = "wait"              // the step waiting for the last reductions after backward
	EvBuffers   = "broadcast-buffers" // rank 0's buffers broadcast before forward
	EvOptimizer = "optimizer"         // the optimizer step (Program.Step)
)

// Event is one interval (or instant, Start == End) of a step on one rank.
type Event struct {
	Name   string    // one of the Ev* kinds
	Rank   int       // the rank that recorded it
	Step   int       // the synchronised step it belongs to, from 0
	Bucket int       // the bucket of an all-reduce, -1 otherwise
	Param  string    // the parameter of a gradient event
	Start  time.Time // when it began
	End    time.Time // when it ended
}

// Timeline records the events of every step of one rank. Forward and backward are told
// apart by the first gradient hook: the loss and the gradient of the last layer (the
// first to arrive) are counted as forward, a few microseconds against a step.
type Timeline struct {
	mu     sync.Mutex
	rank   int
	events []Event
}

// NewTimeline returns an empty timeline of rank, for training loops that record their own
// events (a ZeRO-3 step, evaluation) in the same format.
func NewTimeline(rank int) *Timeline { return &Timeline{rank: rank} }

// Add records e as an event of the timeline's rank.
func (t *Timeline) Add(e Event) { t.add(e) }

func (t *Timeline) add(e Event) {
	t.mu.Lock()
	e.Rank = t.rank
	t.events = append(t.events, e)
	t.mu.Unlock()
}

// Events returns a copy of the recorded events, ordered by start time.
func (t *Timeline) Events() []Event {
	t.mu.Lock()
	out := slices.Clone(t.events)
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Event) int { return a.Start.Compare(b.Start) })
	return out
}

// Reset forgets every event (for example after warm-up steps).
func (t *Timeline) Reset() {
	t.mu.Lock()
	t.events = nil
	t.mu.Unlock()
}

type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

type chromeTrace struct {
	TraceEvents     []chromeEvent `json:"traceEvents"`
	DisplayTimeUnit string        `json:"displayTimeUnit"`
}

// WriteChromeTrace writes the events as Chrome trace JSON (chrome://tracing, Perfetto):
// one process per rank, compute on thread 0 and communication on thread 1. Timestamps are
// microseconds since the Unix epoch, so traces of processes on one machine merge aligned.
func (t *Timeline) WriteChromeTrace(w io.Writer) error {
	tr := chromeTrace{DisplayTimeUnit: "ms"}
	for _, e := range t.Events() {
		ce := chromeEvent{Name: e.Name, Cat: "compute", Ph: "X", Pid: e.Rank,
			Ts: float64(e.Start.UnixNano()) / 1e3, Dur: float64(e.End.Sub(e.Start).Nanoseconds()) / 1e3,
			Args: map[string]any{"step": e.Step}}
		switch e.Name {
		case EvAllReduce, EvBuffers:
			ce.Cat, ce.Tid = "comm", 1
			if e.Bucket >= 0 {
				ce.Name = fmt.Sprintf("all-reduce bucket %d", e.Bucket)
				ce.Args["bucket"] = e.Bucket
			}
		case EvGradient:
			ce.Ph, ce.S, ce.Dur = "i", "t", 0
			ce.Name = "grad " + e.Param
		}
		tr.TraceEvents = append(tr.TraceEvents, ce)
	}
	if err := json.NewEncoder(w).Encode(tr); err != nil {
		return fmt.Errorf("ddp: writing chrome trace of rank %d: %w", t.rank, err)
	}
	return nil
}

// MergeChromeTraces reads Chrome traces written by WriteChromeTrace (one per rank, from any
// process on the machine) and writes them as one trace.
func MergeChromeTraces(w io.Writer, traces ...io.Reader) error {
	out := chromeTrace{DisplayTimeUnit: "ms"}
	for i, r := range traces {
		var tr chromeTrace
		if err := json.NewDecoder(r).Decode(&tr); err != nil {
			return fmt.Errorf("ddp: reading chrome trace %d: %w", i, err)
		}
		out.TraceEvents = append(out.TraceEvents, tr.TraceEvents...)
	}
	if err := json.NewEncoder(w).Encode(out); err != nil {
		return fmt.Errorf("ddp: writing merged chrome trace: %w", err)
	}
	return nil
}

// Summary condenses a timeline.
type Summary struct {
	Steps                         int           // synchronised steps seen
	Buckets                       int           // bucket reductions per step (the last step's)
	Forward, Backward, Optimizer  time.Duration // totals over the steps
	AllReduce                     time.Duration // total time buckets spent being reduced
	Hidden                        time.Duration // part of AllReduce during backward of the same step
	Wait                          time.Duration // time the steps waited for reductions after backward
	OverlapFraction               float64       // Hidden / AllReduce: the all-reduce time hidden behind backward
	FirstLaunchBeforeLastGradient bool          // in every step, bucket 0 launched before the last gradient arrived
}

// Summary computes the totals and the overlap fraction over all recorded steps.
func (t *Timeline) Summary() Summary {
	evs := t.Events()
	type span struct{ s, e time.Time }
	bw := map[int]span{}
	lastGrad := map[int]time.Time{}
	firstLaunch := map[int]time.Time{}
	var s Summary
	buckets := map[int]int{}
	for _, e := range evs {
		switch e.Name {
		case EvForward:
			s.Forward += e.End.Sub(e.Start)
		case EvBackward:
			s.Backward += e.End.Sub(e.Start)
			bw[e.Step] = span{e.Start, e.End}
		case EvOptimizer:
			s.Optimizer += e.End.Sub(e.Start)
		case EvWait:
			s.Wait += e.End.Sub(e.Start)
		case EvGradient:
			if e.Start.After(lastGrad[e.Step]) {
				lastGrad[e.Step] = e.Start
			}
		case EvAllReduce:
			if e.Bucket == 0 {
				firstLaunch[e.Step] = e.Start
			}
			buckets[e.Step]++
		}
	}
	maxStep := -1
	for _, e := range evs {
		if e.Name != EvAllReduce {
			continue
		}
		maxStep = max(maxStep, e.Step)
		s.AllReduce += e.End.Sub(e.Start)
		if b, ok := bw[e.Step]; ok {
			lo, hi := later(e.Start, b.s), earlier(e.End, b.e)
			if hi.After(lo) {
				s.Hidden += hi.Sub(lo)
			}
		}
	}
	s.Steps = len(bw)
	s.Buckets = buckets[maxStep]
	if s.AllReduce > 0 {
		s.OverlapFraction = float64(s.Hidden) / float64(s.AllReduce)
	}
	s.FirstLaunchBeforeLastGradient = len(firstLaunch) > 0
	for step, l := range firstLaunch {
		if g, ok := lastGrad[step]; !ok || !l.Before(g) {
			s.FirstLaunchBeforeLastGradient = false
		}
	}
	return s
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
