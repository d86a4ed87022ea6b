package comm

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// OpRecord is one collective in a rank's flight recorder (see StallReport).
type OpRecord struct {
	Seq   uint64        // sequence number, the same on every rank
	Op    string        // "all-reduce", "broadcast", "all-gather", "reduce-scatter" or "barrier"
	DType DType         // element type (0 for a barrier)
	Count int           // elements (the whole buffer for all-gather and reduce-scatter)
	Bytes int           // bytes of the rank's larger buffer
	State string        // "running", "completed" or "failed"
	Age   time.Duration // time since it started, when the rank answered
	Took  time.Duration // how long it ran; 0 while running
}

// String reads "seq 6 all-reduce float32 x 1024 (4.0 KiB), completed in 1ms, 230ms ago" or
// "seq 7 barrier, running for 2s".
func (r OpRecord) String() string {
	s := fmt.Sprintf("seq %d %s", r.Seq, r.Op)
	if r.DType != 0 {
		s += fmt.Sprintf(" %s x %d (%s)", r.DType, r.Count, humanBytes(r.Bytes))
	}
	if r.State == stateRunning.String() {
		return s + fmt.Sprintf(", running for %v", roundDur(r.Age))
	}
	return s + fmt.Sprintf(", %s in %v, %v ago", r.State, roundDur(r.Took), roundDur(r.Age-r.Took))
}

// PeerStatus is what a peer answered a stalled rank about its collectives.
type PeerStatus struct {
	Rank int
	// Answered is false when the peer did not answer within the probe's bound (at most 2 s):
	// its process is stopped, wedged or gone. The other fields are then zero.
	Answered bool
	// Issued is the highest sequence number the peer has issued (queued or started).
	Issued uint64
	// Recent are the peer's last collectives that started, newest first (up to 4).
	Recent []OpRecord
}

// Arrived reports whether the peer has started collective seq (or a later one).
func (p PeerStatus) Arrived(seq uint64) bool {
	return len(p.Recent) > 0 && p.Recent[0].Seq >= seq
}

// String reads "rank 1 (issued up to seq 6; last: <OpRecord>)", "rank 1 (issued up to seq
// 0; no collective yet)" or "rank 1 (no answer)".
func (p PeerStatus) String() string {
	if !p.Answered {
		return fmt.Sprintf("rank %d (no answer)", p.Rank)
	}
	if len(p.Recent) == 0 {
		return fmt.Sprintf("rank %d (issued up to seq %d; no collective yet)", p.Rank, p.Issued)
	}
	return fmt.Sprintf("rank %d (issued up to seq %d; last: %v)", p.Rank, p.Issued, p.Recent[0])
}

// StallReport describes a collective that has waited past the warning threshold
// (WithWarnAfter) or its timeout, and what each peer was doing then. The package logs it
// once per stalled collective, as a warning, and a timeout's *TimeoutError carries it.
type StallReport struct {
	Rank   int           // the waiting rank
	Seq    uint64        // its collective
	Op     string        // "all-reduce", ...
	Bytes  int           // the collective's bytes on the waiting rank
	Waited time.Duration // how long it had waited when the peers answered
	Peers  []PeerStatus  // every other rank, in rank order
}

// NotArrived returns the ranks that answered and had not started the collective.
func (r *StallReport) NotArrived() []int {
	var out []int
	for _, p := range r.Peers {
		if p.Answered && !p.Arrived(r.Seq) {
			out = append(out, p.Rank)
		}
	}
	return out
}

// Silent returns the ranks that did not answer.
func (r *StallReport) Silent() []int {
	var out []int
	for _, p := range r.Peers {
		if !p.Answered {
			out = append(out, p.Rank)
		}
	}
	return out
}

// String is the report on one line:
//
//	rank 0: all-reduce seq 4 (4.0 KiB) waited 201ms; not arrived: rank 1 (issued up to seq 3;
//	last: seq 3 all-reduce float32 x 1024 (4.0 KiB), completed in 1ms, 205ms ago); no answer:
//	rank 3; arrived: ranks [2]
//
// Each part appears only when it names a rank; the arrived ranks are listed with their
// state when no rank is missing (the data itself is then stuck, or slow).
func (r *StallReport) String() string {
	var missing, silent, arrived []string
	var arrivedRanks []int
	for _, p := range r.Peers {
		switch {
		case !p.Answered:
			silent = append(silent, fmt.Sprint(p.Rank))
		case !p.Arrived(r.Seq):
			missing = append(missing, p.String())
		default:
			arrived = append(arrived, p.String())
			arrivedRanks = append(arrivedRanks, p.Rank)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d: %s seq %d (%s) waited %v", r.Rank, r.Op, r.Seq, humanBytes(r.Bytes), roundDur(r.Waited))
	if len(missing) > 0 {
		fmt.Fprintf(&b, "; not arrived: %s", strings.Join(missing, ", "))
	}
	if len(silent) > 0 {
		fmt.Fprintf(&b, "; no answer: rank %s", strings.Join(silent, ", "))
	}
	if len(missing)+len(silent) == 0 && len(arrived) > 0 {
		fmt.Fprintf(&b, "; every rank arrived: %s", strings.Join(arrived, ", "))
	} else if len(arrived) > 0 {
		fmt.Fprintf(&b, "; arrived: ranks %v", arrivedRanks)
	}
	return b.String()
}

// TimeoutError reports a collective that did not complete within its timeout
// (WithTimeout, GP_COMM_TIMEOUT). errors.Is(err, ErrTimeout) holds. Its Report names the
// ranks that had not arrived and the last collective each ran.
type TimeoutError struct {
	Timeout time.Duration
	Report  StallReport
}

// Error reads "comm: timeout: after 2s: " followed by the report (see StallReport.String).
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%v: after %v: %v", ErrTimeout, e.Timeout, e.Report.String())
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// watchStall arms w's warning and timeout (see Note [Flight recorder]) and returns the
// function that disarms them once w has ended. Both probe the peers first; the timeout then
// fails the group with a *TimeoutError when w is still running.
func (g *group) watchStall(w *work) (stop func()) {
	start, timeout, warn := time.Now(), g.cfg.timeout, g.cfg.warnAfter
	wait := probeWait(timeout)
	report := func() *StallReport {
		r := &StallReport{Rank: g.rank, Seq: w.seq, Op: w.kind.String(), Bytes: w.bytes()}
		r.Peers = g.probe(g.probeCtx, wait)
		r.Waited = time.Since(start)
		return r
	}
	// One timer serves both: it fires at the warning, logs, and re-arms itself for the
	// timeout (collectives are issued at a high rate; a second timer would cost each one).
	warned := !(warn > 0 && warn < timeout && g.size > 1) // only the timer's function uses it
	var mu sync.Mutex                                     // orders the timer's creation before its function reads it
	var timer *time.Timer
	fire := func() {
		if !g.startProbe(w.seq) {
			return
		}
		defer g.probes.Done()
		if !warned {
			warned = true
			r := report()
			if g.stillRunning(w.seq) {
				g.cfg.logger.Warn("comm: collective stalled", "rank", g.rank, "op", r.Op, "seq", r.Seq,
					"waited", roundDur(r.Waited), "not_arrived", r.NotArrived(), "no_answer", r.Silent(),
					"report", r.String())
				mu.Lock()
				timer.Reset(max(0, timeout-time.Since(start)))
				mu.Unlock()
			}
			return
		}
		var r StallReport
		if g.size > 1 {
			r = *report()
		} else {
			r = StallReport{Rank: g.rank, Seq: w.seq, Op: w.kind.String(), Bytes: w.bytes(), Waited: time.Since(start)}
		}
		g.opMu.Lock()
		defer g.opMu.Unlock()
		if g.running == w.seq {
			g.fail(&TimeoutError{Timeout: timeout, Report: r}, true)
		}
	}
	first := timeout
	if !warned {
		first = warn
	}
	mu.Lock()
	timer = time.AfterFunc(first, fire)
	mu.Unlock()
	// A firing re-armed after this Stop finds its collective ended (startProbe) and returns.
	return func() { timer.Stop() }
}

// startProbe registers a probe of collective seq with Close, unless seq has ended.
func (g *group) startProbe(seq uint64) bool {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	if g.running != seq {
		return false
	}
	g.probes.Add(1)
	return true
}

func (g *group) stillRunning(seq uint64) bool {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	return g.running == seq
}

// roundDur rounds d for reports: to the microsecond below a millisecond, to the
// millisecond below a minute, else to the second.
func roundDur(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
