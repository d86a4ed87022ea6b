package tape

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/memory"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// ProfileEnv is the environment variable that turns the per-op device profile on: with
// GP_TAPE_PROFILE=1 when a program is compiled, its first Run starts the profile of its
// device (StartProfile), as if the program had called it. "0" or unset leaves it off; any
// other value is an error of Compile.
const ProfileEnv = "GP_TAPE_PROFILE"

// Note [Per-op device profile]: while a device's profile is on, every Run of a program on
// that device records a pair of timing events on the device's stream around each op that
// computes (views compute nothing and are not timed) and, after the op, reads the bytes the
// device's allocator has in use. At the end of the Run it waits for the stream (one host
// synchronisation per Run, which an unprofiled Run does not make) and adds each op's
// elapsed time to its kind's total: nn/ops's kind name (Conv2dGradX), amp's Round and
// LossScale, GradHook, or a gorgonia op's String (A × B). Off, a Run does no more than look
// the device up in a map.

// profiles holds the profile of each device whose profile is on.
var profiles sync.Map // *cuda.Device -> *Profile

// Profile is the per-op device profile of one device: the device time of each kind of op
// over the profiled Runs of every program on the device, and the memory peak. It is safe
// for concurrent use.
type Profile struct {
	dev *cuda.Device

	mu     sync.Mutex
	runs   int
	ops    map[string]*opAcc
	peak   int64  // the most bytes in use right after an op ran
	peakAt string // that op's node
}

type opAcc struct {
	nodes map[*G.Node]*nodeAcc
	calls int
	ns    float64
}

type nodeAcc struct {
	calls int
	ns    float64
}

// StartProfile turns the per-op profile of dev on: every program on dev records into it
// from its next Run (see Note [Per-op device profile]). It returns dev's profile, the one
// already collecting when the profile is on. The profile holds dev until StopProfile.
func StartProfile(dev *cuda.Device) *Profile {
	pr, _ := profiles.LoadOrStore(dev, &Profile{dev: dev, ops: map[string]*opAcc{}})
	return pr.(*Profile)
}

// StopProfile turns the profile of dev off and returns what it collected, nil when it was
// off. A program compiled under GP_TAPE_PROFILE=1 whose first Run has not come yet still
// starts a new profile then.
func StopProfile(dev *cuda.Device) *Profile {
	pr, ok := profiles.LoadAndDelete(dev)
	if !ok {
		return nil
	}
	return pr.(*Profile)
}

// DeviceProfile returns the profile of dev, nil while it is off.
func DeviceProfile(dev *cuda.Device) *Profile {
	pr, ok := profiles.Load(dev)
	if !ok {
		return nil
	}
	return pr.(*Profile)
}

// WriteProfile writes the profile of dev as a table of its top ops by device time
// (ProfileReport.WriteTable); it writes nothing when the profile of dev is off, so a
// program may call it unconditionally at its end.
func WriteProfile(w io.Writer, dev *cuda.Device, top int) error {
	pr := DeviceProfile(dev)
	if pr == nil {
		return nil
	}
	return pr.Report().WriteTable(w, top)
}

// OpTime is the device time of one kind of op over the profiled Runs.
type OpTime struct {
	Op    string        // the kind (Note [Per-op device profile])
	Nodes int           // the nodes of this kind that ran
	Calls int           // their runs: Nodes times the Runs of their programs
	Time  time.Duration // the device time between the events around them, summed
}

// NodeTime is the device time of one node over the profiled Runs.
type NodeTime struct {
	Node  string // the node's name
	Op    string // its kind (OpTime.Op)
	Calls int
	Time  time.Duration
}

// ProfileReport is a Profile read at one moment.
type ProfileReport struct {
	Device     string        // the device's ordinal and name
	Runs       int           // the profiled Runs, of every program on the device
	DeviceTime time.Duration // the sum of Ops' Time
	Ops        []OpTime      // every kind that ran, most device time first (then by name)
	Nodes      []NodeTime    // every node that ran, most device time first (then by name)
	// PeakInUse is the most bytes the device's allocator had in use right after an op ran,
	// over the profiled Runs, and PeakNode that op's node (with its op).
	PeakInUse int64
	PeakNode  string
	// Memory is the allocator's statistics when the report was made (its PeakInUse counts
	// since the device opened or its last ResetPeakMemory, profiled or not).
	Memory memory.Stats
}

// Report returns what the profile has collected so far.
func (pr *Profile) Report() ProfileReport {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	r := ProfileReport{
		Device:    fmt.Sprintf("cuda device %d (%s)", pr.dev.Ordinal(), pr.dev.Name()),
		Runs:      pr.runs,
		PeakInUse: pr.peak,
		PeakNode:  pr.peakAt,
		Memory:    pr.dev.MemoryStats(),
	}
	for name, a := range pr.ops {
		t := time.Duration(a.ns)
		r.Ops = append(r.Ops, OpTime{Op: name, Nodes: len(a.nodes), Calls: a.calls, Time: t})
		r.DeviceTime += t
		for n, na := range a.nodes {
			r.Nodes = append(r.Nodes, NodeTime{Node: n.Name(), Op: name, Calls: na.calls, Time: time.Duration(na.ns)})
		}
	}
	slices.SortFunc(r.Ops, func(a, b OpTime) int {
		return cmp.Or(cmp.Compare(b.Time, a.Time), cmp.Compare(a.Op, b.Op))
	})
	slices.SortFunc(r.Nodes, func(a, b NodeTime) int {
		return cmp.Or(cmp.Compare(b.Time, a.Time), cmp.Compare(a.Node, b.Node))
	})
	return r
}

// WriteTable writes the report: a header line, the top kinds of op by device time (all of
// them when top <= 0) with their share of the device time, the top nodes likewise, and the
// memory line.
func (r ProfileReport) WriteTable(w io.Writer, top int) error {
	perRun := 0.0
	if r.Runs > 0 {
		perRun = ms(r.DeviceTime) / float64(r.Runs)
	}
	if _, err := fmt.Fprintf(w, "device profile: %s, %d runs, %.3f ms of op time per run (events around each op)\n", r.Device, r.Runs, perRun); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "op\t nodes\t  calls\t  total ms\t  mean ms\t share")
	shown := r.Ops
	if top > 0 && len(shown) > top {
		shown = shown[:top]
	}
	for _, o := range shown {
		mean, share := 0.0, 0.0
		if o.Calls > 0 {
			mean = ms(o.Time) / float64(o.Calls)
		}
		if r.DeviceTime > 0 {
			share = 100 * float64(o.Time) / float64(r.DeviceTime)
		}
		fmt.Fprintf(tw, "%s\t%6d\t%7d\t%10.3f\t%9.4f\t%5.1f%%\n", o.Op, o.Nodes, o.Calls, ms(o.Time), mean, share)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(r.Ops) - len(shown); n > 0 {
		if _, err := fmt.Fprintf(w, "(%d more kinds of op)\n", n); err != nil {
			return err
		}
	}
	nodes := r.Nodes
	if top > 0 && len(nodes) > top {
		nodes = nodes[:top]
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "node\top\t  calls\t  total ms\t  mean ms")
	for _, o := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%7d\t%10.3f\t%9.4f\n", o.Node, o.Op, o.Calls, ms(o.Time), ms(o.Time)/float64(max(o.Calls, 1)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := len(r.Nodes) - len(nodes); n > 0 {
		if _, err := fmt.Fprintf(w, "(%d more nodes)\n", n); err != nil {
			return err
		}
	}
	m := r.Memory
	_, err := fmt.Fprintf(w, "memory: peak %s in use after %s; allocator: %s in use, %s reserved, peak %s, %d hits, %d misses, %d retries\n",
		mib(r.PeakInUse), cmp.Or(r.PeakNode, "no op"), mib(m.InUse), mib(m.Reserved), mib(m.PeakInUse), m.Hits, m.Misses, m.Retries)
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// profileEnv reads ProfileEnv for Compile.
func profileEnv() (bool, error) {
	switch v := os.Getenv(ProfileEnv); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("cuda/tape: %s=%q: want 1 (profile every op's device time) or 0 (off)", ProfileEnv, v)
	}
}

// runProfile records one profiled Run of a program.
type runProfile struct {
	pr     *Profile
	ctx    driver.Context
	stream driver.Stream
	ev     []driver.Event // the program's: a start and an end per step
	timed  []bool         // by step: events were recorded around it
	peak   int64
	peakAt int
}

// profile returns the profile this Run records into, nil when the device's is off.
func (p *Program) profile() *Profile {
	if pr := DeviceProfile(p.dev); pr != nil {
		return pr
	}
	if p.profileEnv {
		p.profileEnv = false // once: StopProfile stays stopped
		return StartProfile(p.dev)
	}
	return nil
}

// startProfile prepares the events of a profiled Run (created at the program's first).
func (p *Program) startProfile(pr *Profile) (*runProfile, error) {
	c := p.dev.Context()
	for len(p.events) < 2*len(p.steps) {
		e, err := c.EventCreate(true)
		if err != nil {
			return nil, fmt.Errorf("cuda/tape: profile: creating a timing event: %w", err)
		}
		p.events = append(p.events, e)
	}
	return &runProfile{pr: pr, ctx: c, stream: p.dev.Stream(), ev: p.events, timed: make([]bool, len(p.steps)), peakAt: -1}, nil
}

// before records step i's start event when the step computes.
func (r *runProfile) before(i int, st *step) error {
	if r == nil || st.alias {
		return nil
	}
	r.timed[i] = true
	return r.ctx.EventRecord(r.ev[2*i], r.stream)
}

// after records step i's end event.
func (r *runProfile) after(i int) error {
	if r == nil || !r.timed[i] {
		return nil
	}
	return r.ctx.EventRecord(r.ev[2*i+1], r.stream)
}

// sample notes the bytes in use right after step i's op ran, before its inputs are freed.
func (r *runProfile) sample(i int, dev *cuda.Device) {
	if r == nil {
		return
	}
	if u := dev.MemoryStats().InUse; u > r.peak {
		r.peak, r.peakAt = u, i
	}
}

// finishProfile waits for the Run's work and adds its op times to the profile.
func (p *Program) finishProfile(ctx context.Context, r *runProfile) error {
	if err := p.dev.Synchronize(ctx); err != nil {
		return fmt.Errorf("cuda/tape: profile: %w", err)
	}
	type rec struct {
		node *G.Node
		name string
		ns   float64
	}
	var recs []rec
	for i, timed := range r.timed {
		if !timed {
			continue
		}
		msec, err := r.ctx.EventElapsed(r.ev[2*i], r.ev[2*i+1])
		if err != nil {
			return fmt.Errorf("cuda/tape: profile: node %s: %w", p.steps[i].node.Name(), err)
		}
		recs = append(recs, rec{p.steps[i].node, opLabel(&p.steps[i]), float64(msec) * 1e6})
	}
	pr := r.pr
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.runs++
	for _, x := range recs {
		a := pr.ops[x.name]
		if a == nil {
			a = &opAcc{nodes: map[*G.Node]*nodeAcc{}}
			pr.ops[x.name] = a
		}
		na := a.nodes[x.node]
		if na == nil {
			na = &nodeAcc{}
			a.nodes[x.node] = na
		}
		na.calls++
		na.ns += x.ns
		a.calls++
		a.ns += x.ns
	}
	if r.peakAt >= 0 && r.peak > pr.peak {
		n := p.steps[r.peakAt].node
		pr.peak, pr.peakAt = r.peak, fmt.Sprintf("%s (%s)", n.Name(), opLabel(&p.steps[r.peakAt]))
	}
	return nil
}

// opLabel is the kind a step's time is added to (Note [Per-op device profile]).
func opLabel(st *step) string {
	op := st.node.Op()
	if st.hook != nil {
		return "GradHook"
	}
	if d, ok := ops.Describe(op); ok {
		return d.Kind.String()
	}
	if d, ok := amp.DescribeOp(op); ok {
		if d.Round {
			return "amp.Round"
		}
		return "amp.LossScale"
	}
	return op.String()
}
