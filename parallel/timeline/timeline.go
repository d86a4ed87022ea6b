// Package timeline records one rank's training steps as events (forward, backward, each
// gradient's arrival, each bucket's reduction, the optimizer) in a ring of the last steps,
// summarises how much communication was hidden behind backward, and writes Chrome traces.
package timeline

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Event kinds recorded in a Timeline. A training loop may record other names too (a ZeRO-3
// step records "forward+backward"): they are written to traces as compute and left out of
// the Summary's figures.
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

// DefaultSteps is the number of most recent steps a timeline keeps unless New is told
// otherwise: about 1.4 MB of events for resnet18 (~70 events a step).
const DefaultSteps = 200

// Timeline records the events of the last N steps of one rank (N given to New; the zero
// Timeline keeps DefaultSteps and is of rank 0), so its memory is bounded however long the
// run: the events of older steps are dropped once a step N steps newer begins, and Events and
// WriteChromeTrace show only the last N steps. Summary still covers every step since the
// start (or the last Reset): each step's figures are folded into running totals when its
// events are dropped.
//
// Forward and backward are told apart by the first gradient hook: the loss and the
// gradient of the last layer (the first to arrive) are counted as forward, a few
// microseconds against a step.
//
// A Timeline is safe for concurrent use. Events are grouped by their Step field; an event
// of a step that has already been dropped counts in the summary's totals, but not in the
// overlap of that step (its backward is gone).
type Timeline struct {
	mu      sync.Mutex
	rank    int
	keep    int         // steps shown by Events: N; 0 when the timeline is off
	set     bool        // keep was configured (the zero Timeline keeps DefaultSteps)
	slots   []stepSlot  // ring of the recent steps, by step modulo len(slots)
	maxStep int         // the newest step recorded
	any     bool        // an event was recorded since the start or Reset
	done    stepSummary // folded figures of the dropped steps
}

// stepSlot holds the events of one step; its slice is reused for a later step.
type stepSlot struct {
	step   int
	used   bool
	events []Event
}

// New returns an empty timeline of rank that keeps the events of the last steps steps (0 or
// negative: none, only Summary's running totals). DDP makes one per rank (its TimelineSteps
// option sets steps); a training loop that records its own events (a ZeRO-3 step,
// evaluation) makes its own, in the same format.
func New(rank, steps int) *Timeline {
	return &Timeline{rank: rank, keep: max(steps, 0), set: true}
}

// Steps is the number of most recent steps whose events the timeline keeps (0: none, the
// timeline is off and only Summary's totals are kept).
func (t *Timeline) Steps() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	return t.keep
}

// init sizes the ring. The ring holds at least two steps even when the timeline is off,
// so that a step's all-reduces that finish after its backward (or whose backward is
// recorded after them) still meet it before the step is folded into the summary.
func (t *Timeline) init() {
	if t.slots != nil {
		return
	}
	if !t.set {
		t.keep, t.set = DefaultSteps, true
	}
	t.slots = make([]stepSlot, max(t.keep, 2))
}

// Add records e as an event of the timeline's rank (its Rank field is overwritten). Events
// are grouped by Step: recording an event of a step N steps newer than the oldest one kept
// drops that oldest step's events, after folding them into the summary.
func (t *Timeline) Add(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	e.Rank = t.rank
	if !t.any || e.Step > t.maxStep {
		t.maxStep, t.any = e.Step, true
	}
	n := len(t.slots)
	sl := &t.slots[((e.Step%n)+n)%n]
	switch {
	case sl.used && sl.step == e.Step:
	case sl.used && sl.step > e.Step:
		// The step was dropped already: its totals still count.
		t.done.merge(summarise([]Event{e}))
		return
	default:
		if sl.used {
			t.done.merge(summarise(sl.events))
			clear(sl.events) // drop the references of the reused backing array
		}
		sl.step, sl.used, sl.events = e.Step, true, sl.events[:0]
	}
	sl.events = append(sl.events, e)
}

// Events returns a copy of the events of the last Steps() steps, ordered by start time.
func (t *Timeline) Events() []Event {
	t.mu.Lock()
	var out []Event
	for _, sl := range t.slots {
		if sl.used && sl.step > t.maxStep-t.keep {
			out = append(out, sl.events...)
		}
	}
	t.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Event) int { return a.Start.Compare(b.Start) })
	return out
}

// Reset forgets every event and the summary's totals (for example after warm-up steps).
// The number of steps kept stays.
func (t *Timeline) Reset() {
	t.mu.Lock()
	for i := range t.slots {
		clear(t.slots[i].events)
		t.slots[i] = stepSlot{events: t.slots[i].events[:0]}
	}
	t.maxStep, t.any, t.done = 0, false, stepSummary{}
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
	TraceEvents     []chromeEvent  `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData,omitempty"`
}

// WriteChromeTrace writes the events as Chrome trace JSON (chrome://tracing, Perfetto):
// one process per rank, compute on thread 0 and communication on thread 1. Timestamps are
// microseconds since the Unix epoch, so traces of processes on one machine merge aligned.
// Only the last Steps() steps are in it; its otherData says so ("steps_kept", "first_step",
// "last_step", "note").
func (t *Timeline) WriteChromeTrace(w io.Writer) error {
	evs := t.Events()
	tr := chromeTrace{DisplayTimeUnit: "ms", OtherData: map[string]any{
		"steps_kept": t.Steps(),
		"note":       "events of the last steps_kept steps only; older steps were dropped (a recorder made to keep more steps keeps more)",
	}}
	if len(evs) > 0 {
		lo, hi := evs[0].Step, evs[0].Step
		for _, e := range evs {
			lo, hi = min(lo, e.Step), max(hi, e.Step)
		}
		tr.OtherData["first_step"], tr.OtherData["last_step"] = lo, hi
	}
	for _, e := range evs {
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
		return fmt.Errorf("timeline: writing chrome trace of rank %d: %w", t.rank, err)
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
			return fmt.Errorf("timeline: reading chrome trace %d: %w", i, err)
		}
		out.TraceEvents = append(out.TraceEvents, tr.TraceEvents...)
		if out.OtherData == nil {
			out.OtherData = tr.OtherData
		}
	}
	if err := json.NewEncoder(w).Encode(out); err != nil {
		return fmt.Errorf("timeline: writing merged chrome trace: %w", err)
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

// Summary computes the totals and the overlap fraction over every step recorded since the
// start or the last Reset, including the steps whose events were dropped from the ring.
func (t *Timeline) Summary() Summary {
	t.mu.Lock()
	acc := t.done
	for _, sl := range t.slots {
		if sl.used {
			acc.merge(summarise(slices.Clone(sl.events)))
		}
	}
	t.mu.Unlock()
	s := acc.Summary
	if s.AllReduce > 0 {
		s.OverlapFraction = float64(s.Hidden) / float64(s.AllReduce)
	}
	s.FirstLaunchBeforeLastGradient = acc.launchSteps > 0 && acc.launchOK
	return s
}

// stepSummary is the part of a Summary that adds up over steps, with what it takes to
// combine two of them.
type stepSummary struct {
	Summary
	lastARStep  int  // the newest step with an all-reduce (Summary.Buckets is its count)
	hasAR       bool // some step had an all-reduce
	launchSteps int  // steps in which bucket 0 was reduced
	launchOK    bool // in each of them, before the last gradient (true when launchSteps is 0)
}

func (a *stepSummary) merge(b stepSummary) {
	if a.launchSteps == 0 {
		a.launchOK = true
	}
	a.Steps += b.Steps
	a.Forward += b.Forward
	a.Backward += b.Backward
	a.Optimizer += b.Optimizer
	a.AllReduce += b.AllReduce
	a.Hidden += b.Hidden
	a.Wait += b.Wait
	if b.hasAR && (!a.hasAR || b.lastARStep >= a.lastARStep) {
		a.hasAR, a.lastARStep, a.Buckets = true, b.lastARStep, b.Buckets
	}
	a.launchSteps += b.launchSteps
	a.launchOK = a.launchOK && (b.launchSteps == 0 || b.launchOK)
}

// summarise computes the figures of evs (usually one step's events; it sorts them).
func summarise(evs []Event) stepSummary {
	slices.SortStableFunc(evs, func(a, b Event) int { return a.Start.Compare(b.Start) })
	type span struct{ s, e time.Time }
	bw := map[int]span{}
	lastGrad := map[int]time.Time{}
	firstLaunch := map[int]time.Time{}
	var s stepSummary
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
	for _, e := range evs {
		if e.Name != EvAllReduce {
			continue
		}
		if !s.hasAR || e.Step > s.lastARStep {
			s.hasAR, s.lastARStep = true, e.Step
		}
		s.AllReduce += e.End.Sub(e.Start)
		if b, ok := bw[e.Step]; ok {
			lo, hi := later(e.Start, b.s), earlier(e.End, b.e)
			if hi.After(lo) {
				s.Hidden += hi.Sub(lo)
			}
		}
	}
	s.Steps = len(bw)
	s.Buckets = buckets[s.lastARStep]
	s.launchSteps, s.launchOK = len(firstLaunch), true
	for step, l := range firstLaunch {
		if g, ok := lastGrad[step]; !ok || !l.Before(g) {
			s.launchOK = false
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
