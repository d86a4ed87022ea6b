package scaling

import (
	"fmt"
	"math"
	"slices"
)

// Note [Hosts whose CPUs move the bytes]
//
// The α–β Link prices a collective by the bytes on the wire alone. On CPU hosts (this
// project's test bed: network namespaces on one 2-core machine) the same CPUs that compute
// also copy every TCP byte through the kernel and add every reduced element, so a 10 Gbit/s
// link is never the bottleneck and the α–β β fitted at one rate is wrong at another. Costs
// therefore prices a collective by three byte counts, all derived from the algorithm
// (hierarchical or flat ring, see Plan):
//
//   - wire: bytes each host's link carries in one direction, at Wire bytes/s;
//   - tcp: bytes through TCP summed over all ranks (loopback edges included), at TCP CPU
//     seconds per byte;
//   - mem: bytes reduced or copied through shared memory (and the ring's reductions), at Mem
//     CPU seconds per byte;
//
// CPU seconds are shared by Cores cores. A byte costs more CPU once the job's buffers (all
// ranks' together, Plan.Working) no longer fit the last-level cache: the CPU seconds grow by
// Spill × the fraction of the working set beyond Cache. The collective is pipelined by chunks, so the wire
// and the CPUs work at once: its time is max(wire, cpu) + Serial·min(wire, cpu) + Steps·α,
// where Serial is the part of the shorter that the pipeline does not hide (0: perfect
// overlap, 1: none). The constants are fitted (FitCosts) on measured runs and checked on
// others.

// Costs are the constants of the host-level collective model (see Note [Hosts whose CPUs
// move the bytes]).
type Costs struct {
	Alpha  float64 // seconds per ring step
	Wire   float64 // bytes per second a host's link carries, per direction
	TCP    float64 // CPU seconds per byte sent and received over TCP (both ends)
	Mem    float64 // CPU seconds per byte reduced or copied in memory
	Cores  float64 // cores the CPU work is spread over
	Serial float64 // fraction of min(wire, cpu) not hidden by the pipeline
	Cache  float64 // bytes of last-level cache shared by the ranks (0: no cache effect)
	Spill  float64 // extra CPU cost, relative, of a working set far beyond Cache
}

// Plan is what one collective moves (see Note [Hosts whose CPUs move the bytes]).
type Plan struct {
	Steps          float64 // ring steps (latency terms)
	Wire, TCP, Mem float64 // bytes
	Working        float64 // bytes of the buffers of all ranks together
	Ranks          float64 // processes doing the CPU work
}

// Algorithm names accepted by PlanOf.
const (
	Hier = "hier" // shared memory inside a host, a ring among host leaders (parallel/comm)
	Flat = "flat" // one ring over all ranks, TCP between every pair (loopback inside a host)
)

// PlanOf is the plan of op ("all-reduce", "reduce-scatter", "all-gather") on a b-byte
// buffer over hosts × perHost ranks run by algo (Hier or Flat). With perHost 1 both are the
// same ring.
func PlanOf(op, algo string, hosts, perHost int, b float64) (Plan, error) {
	H, L := float64(hosts), float64(perHost)
	n := H * L
	if hosts < 1 || perHost < 1 {
		return Plan{}, fmt.Errorf("scaling: %d hosts × %d ranks", hosts, perHost)
	}
	var half bool
	switch op {
	case "all-reduce":
	case "reduce-scatter", "all-gather":
		half = true
	default:
		return Plan{}, fmt.Errorf("scaling: no plan for %q", op)
	}
	f := 2.0 // all-reduce: reduce-scatter then all-gather
	if half {
		f = 1
	}
	p := Plan{Working: n * b, Ranks: n}
	switch algo {
	case Hier:
		p.Steps = f * (H - 1)
		p.Wire = f * (H - 1) / H * b
		p.TCP = f * (H - 1) * b // H leaders, each f(H−1)/H·b out
		switch op {
		case "all-reduce": // up: H(L−1) buffers added; ring adds (H−1)/H·b per host; down: H(L−1) copies
			p.Mem = 2*H*(L-1)*b + (H-1)*b
		case "reduce-scatter": // up, the ring's adds, each rank handed its shard
			p.Mem = H*(L-1)*b + (H-1)*b + (L-1)/L*b
		case "all-gather": // shards collected, the whole buffer copied down
			p.Mem = (L-1)/L*b + H*(L-1)*b
		}
	case Flat:
		p.Steps = f * (n - 1)
		p.Wire = f * (n - 1) / n * b // one ring edge leaves each host
		p.TCP = f * (n - 1) * b      // n edges, each f(n−1)/n·b
		if op != "all-gather" {
			p.Mem = (n - 1) * b // each rank adds (n−1)/n·b
		}
	default:
		return Plan{}, fmt.Errorf("scaling: no algorithm %q", algo)
	}
	if hosts == 1 {
		p.Wire = 0
	}
	return p, nil
}

// Time is the plan's time under c on an otherwise idle machine.
func (c Costs) Time(p Plan) float64 { return c.TimeLoaded(p, 0) }

// TimeLoaded is the plan's time when the machine's run queue holds load runnable threads on
// average (the one-minute load average, the plan's own ranks included): the ranks get
// Ranks/load of the cores when load exceeds Ranks, as a fair scheduler gives them. The wire
// is not shared.
func (c Costs) TimeLoaded(p Plan, load float64) float64 {
	var wire float64
	if c.Wire > 0 {
		wire = p.Wire / c.Wire
	}
	share := 1.0
	if load > p.Ranks && p.Ranks > 0 {
		share = p.Ranks / load
	}
	cpu := c.CPU(p) / math.Max(c.Cores, 1) / share
	return p.Steps*c.Alpha + math.Max(wire, cpu) + c.Serial*math.Min(wire, cpu)
}

// CPU is the plan's CPU seconds, all ranks together.
func (c Costs) CPU(p Plan) float64 {
	spill := 1.0
	if c.Cache > 0 && p.Working > c.Cache {
		spill += c.Spill * (1 - c.Cache/p.Working)
	}
	return (c.TCP*p.TCP + c.Mem*p.Mem) * spill
}

// Point is one measured collective for FitCosts.
type Point struct {
	Plan    Plan
	Rate    float64 // the link's shaped rate, bytes per second
	Seconds float64 // measured
	Load    float64 // one-minute load average during the measurement (0: not known)
}

// FitCosts fits c's Alpha, TCP, Mem, Serial, Spill (when start has a Cache) and the wire efficiency (Wire = efficiency ×
// the point's rate) to the points by least squares on log(predicted/measured), starting from
// start (Cores and Wire/rate of start kept as the initial guess); it returns the costs with
// Wire as the efficiency (the caller multiplies by a rate, see AtRate) and the median
// |relative error| of the fit.
func FitCosts(points []Point, start Costs) (Costs, float64) {
	if len(points) == 0 {
		return start, 0
	}
	loss := func(c Costs) float64 {
		var s float64
		for _, p := range points {
			r := math.Log(c.AtRate(p.Rate).TimeLoaded(p.Plan, p.Load) / p.Seconds)
			s += r * r
		}
		return s
	}
	c := start
	params := []*float64{&c.Alpha, &c.Wire, &c.TCP, &c.Mem, &c.Serial}
	if c.Cache > 0 {
		params = append(params, &c.Spill)
	}
	for _, v := range params {
		if *v <= 0 {
			*v = 1e-12
		}
	}
	best := loss(c)
	// Coordinate descent in log space with shrinking steps: the loss is smooth and the
	// parameters positive, so multiplicative moves keep them positive.
	for step := 1.0; step > 1e-4; {
		moved := false
		for _, v := range params {
			for _, f := range []float64{1 + step, 1 / (1 + step)} {
				old := *v
				*v = old * f
				if c.Wire > 1 || c.Serial > 1 {
					*v = old
					continue
				}
				if l := loss(c); l < best {
					best, moved = l, true
				} else {
					*v = old
				}
			}
		}
		if !moved {
			step /= 2
		}
	}
	errs := make([]float64, len(points))
	for i, p := range points {
		errs[i] = math.Abs(c.AtRate(p.Rate).TimeLoaded(p.Plan, p.Load)/p.Seconds - 1)
	}
	return c, median(errs)
}

// AtRate is c for a link of rate bytes/s, c.Wire being the efficiency (fraction of the rate
// a host's link carries).
func (c Costs) AtRate(rate float64) Costs {
	c.Wire *= rate
	return c
}

// DDPCost predicts a DDP step as DDP does, with each bucket's all-reduce priced by cost
// (seconds on the link, and CPU seconds it takes from this rank's compute). The CPU taken
// while backward still runs delays backward (contention: the ranks' cores are busy with
// compute, as on the test bed, where each rank has one of the machine's cores); the CPU
// taken after backward is already inside the all-reduce's time.
func DDPCost(p Profile, cuts []int, cost func(b float64) (seconds, cpu float64)) (Step, error) {
	type bucket struct{ ready, bytes float64 }
	var bs []bucket
	now, next, bytes := p.Forward, 0, 0
	for i, l := range p.Layers {
		now += l.Backward
		bytes += l.Bytes
		if i+1 == len(p.Layers) || (next < len(cuts) && cuts[next] == i+1) {
			bs = append(bs, bucket{now, float64(bytes)})
			bytes = 0
			next++
		}
	}
	// Each bucket whose all-reduce overlaps backward delays the rest of backward (and so the
	// later buckets' gradients) by its CPU share within the overlap.
	free, busy, shift := p.Forward, 0.0, 0.0
	for _, b := range bs {
		d, cpu := cost(b.bytes)
		start := max(free, b.ready+shift)
		free = start + d
		busy += d
		if d > 0 {
			shift += cpu * max(0, min(free, now+shift)-start) / d
		}
	}
	end := now + shift
	return newStep(p.Compute(), max(end, free)+p.Optimizer, busy)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
