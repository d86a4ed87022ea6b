package scaling

import (
	"math"
	"testing"
)

// Byte counts of the plans, worked out by hand from the algorithms (Note [Hosts whose CPUs
// move the bytes]) for a 1-byte buffer.
func TestPlanOf(t *testing.T) {
	for _, c := range []struct {
		op, algo string
		h, l     int
		want     Plan
	}{
		// 2 leaders: each sends half the buffer twice (b); the up stage adds 2 buffers (one
		// per host), the ring adds 1/2 per host, the down stage copies 2.
		{"all-reduce", Hier, 2, 2, Plan{Steps: 2, Wire: 1, TCP: 2, Mem: 5}},
		{"reduce-scatter", Hier, 3, 2, Plan{Steps: 2, Wire: 2.0 / 3, TCP: 2, Mem: 3 + 2 + 0.5}},
		{"all-gather", Hier, 2, 2, Plan{Steps: 1, Wire: 0.5, TCP: 1, Mem: 0.5 + 2}},
		// Flat ring of 4 ranks: each of the 4 edges carries 2·3/4, one edge leaves each host.
		{"all-reduce", Flat, 2, 2, Plan{Steps: 6, Wire: 1.5, TCP: 6, Mem: 3}},
		{"all-gather", Flat, 3, 2, Plan{Steps: 5, Wire: 5.0 / 6, TCP: 5}},
		// One rank per host: both algorithms are the one ring.
		{"all-reduce", Hier, 2, 1, Plan{Steps: 2, Wire: 1, TCP: 2, Mem: 1}},
		{"all-reduce", Flat, 2, 1, Plan{Steps: 2, Wire: 1, TCP: 2, Mem: 1}},
		// One host: nothing on the wire.
		{"all-reduce", Flat, 1, 2, Plan{Steps: 2, Wire: 0, TCP: 2, Mem: 1}},
	} {
		got, err := PlanOf(c.op, c.algo, c.h, c.l, 1)
		if w := float64(c.h * c.l); !near(got.Working, w) {
			t.Errorf("PlanOf(%s, %s, %d, %d).Working = %g, want %g", c.op, c.algo, c.h, c.l, got.Working, w)
		}
		if err != nil || !near(got.Steps, c.want.Steps) || !near(got.Wire, c.want.Wire) || !near(got.TCP, c.want.TCP) || !near(got.Mem, c.want.Mem) {
			t.Errorf("PlanOf(%s, %s, %d, %d) = %+v, %v; want %+v", c.op, c.algo, c.h, c.l, got, err, c.want)
		}
	}
	if _, err := PlanOf("broadcast", Hier, 2, 2, 1); err == nil {
		t.Error("PlanOf(broadcast) did not fail")
	}
}

func TestCostsTime(t *testing.T) {
	p := Plan{Steps: 2, Wire: 1e6, TCP: 2e6, Mem: 1e6}
	c := Costs{Alpha: 1e-4, Wire: 1e8, TCP: 1e-9, Mem: 2e-9, Cores: 2, Serial: 0.5}
	wire, cpu := 1e6/1e8, (2e6*1e-9+1e6*2e-9)/2 // 10 ms, 2 ms
	if got, want := c.Time(p), 2e-4+wire+0.5*cpu; !near(got, want) {
		t.Errorf("Time = %g, want %g", got, want)
	}
	c.Wire = 1e9 // 1 ms on the wire: now the CPU bounds it
	if got, want := c.Time(p), 2e-4+cpu+0.5*1e-3; !near(got, want) {
		t.Errorf("CPU-bound Time = %g, want %g", got, want)
	}
	// Working set 4 times the cache: 3/4 of it spills, CPU × (1 + 0.4·3/4).
	c.Cache, c.Spill, p.Working = 1e6, 0.4, 4e6
	if got, want := c.Time(p), 2e-4+cpu*1.3+0.5*1e-3; !near(got, want) {
		t.Errorf("spilled Time = %g, want %g", got, want)
	}
}

// FitCosts recovers the constants that generated the points (exact times, so the fit's
// error must be near 0), over two rates and both algorithms.
func TestFitCostsRecovers(t *testing.T) {
	truth := Costs{Alpha: 2e-4, Wire: 0.9, TCP: 1.5e-9, Mem: 3e-10, Cores: 2, Serial: 0.3, Cache: 32 << 20, Spill: 0.6}
	var pts []Point
	for _, rate := range []float64{125e6, 1.25e9} {
		for _, op := range []string{"all-reduce", "reduce-scatter", "all-gather"} {
			for _, algo := range []string{Hier, Flat} {
				for _, h := range []int{2, 3} {
					for _, b := range []float64{1 << 20, 16 << 20, 64 << 20} {
						p, _ := PlanOf(op, algo, h, 2, b)
						pts = append(pts, Point{Plan: p, Rate: rate, Seconds: truth.AtRate(rate).Time(p)})
					}
				}
			}
		}
	}
	got, med := FitCosts(pts, Costs{Alpha: 1e-3, Wire: 0.5, TCP: 1e-8, Mem: 1e-8, Cores: 2, Serial: 0.5, Cache: 32 << 20, Spill: 0.1})
	if med > 0.01 {
		t.Errorf("median error %.3f after the fit, want < 1%%: %+v", med, got)
	}
	if math.Abs(got.Wire/truth.Wire-1) > 0.02 || math.Abs(got.TCP/truth.TCP-1) > 0.05 {
		t.Errorf("fit %+v, truth %+v", got, truth)
	}
}

// With no CPU cost DDPCost is DDP over the same link; CPU taken during backward delays it.
func TestDDPCost(t *testing.T) {
	p := Profile{Forward: 0.1, Optimizer: 0.01, Layers: []Layer{
		{"a", 0.05, 4e6}, {"b", 0.05, 4e6}, {"c", 0.05, 4e6}}}
	l := Link{Alpha: 1e-3, Beta: 1e8}
	top := Topology{Hosts: 2, PerHost: 1, Rails: 1, Inter: l}
	cuts := []int{1, 2}
	want, _ := DDP(p, top, cuts)
	got, _ := DDPCost(p, cuts, func(b float64) (float64, float64) { return top.AllReduce(b), 0 })
	if !near(got.Time, want.Time) {
		t.Errorf("DDPCost without CPU = %g, DDP = %g", got.Time, want.Time)
	}
	// Bucket 0's all-reduce (42 ms) runs 0.15–0.192 s, inside backward: backward is delayed
	// by its 10 ms of CPU. Bucket 1 is ready at 0.21 s (0.20 + 0.01), runs to 0.252, inside
	// backward (now ending at 0.26): another 10 ms. Bucket 2 is ready when backward ends,
	// 0.27 s, runs to 0.312 with no backward left to delay; the optimizer adds 10 ms.
	slow, _ := DDPCost(p, cuts, func(b float64) (float64, float64) { return top.AllReduce(b), 0.01 })
	if w := 0.312 + 0.01; !near(slow.Time, w) {
		t.Errorf("DDPCost with CPU = %g, want %g", slow.Time, w)
	}
}
