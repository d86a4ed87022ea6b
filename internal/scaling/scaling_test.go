package scaling

import (
	"math"
	"slices"
	"testing"
)

// Tolerance 1e-12 relative: the formulas are closed-form, only rounding differs.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestRing(t *testing.T) {
	l := Link{Alpha: 1e-3, Beta: 1e9}
	for _, c := range []struct {
		n    int
		b    float64
		want float64
	}{
		{1, 1e9, 0},
		{2, 1e9, 1 + 2e-3},   // 2·1/2·1 s + 2·1·α
		{4, 1e9, 1.5 + 6e-3}, // 2·3/4 + 6α
		{8, 8e8, 2*7.0/8*0.8 + 14e-3},
	} {
		if got := l.Ring(c.n, c.b); !near(got, c.want) {
			t.Errorf("Ring(%d, %g) = %g, want %g", c.n, c.b, got, c.want)
		}
		if got := l.Half(c.n, c.b); !near(got, c.want/2) {
			t.Errorf("Half(%d, %g) = %g, want %g", c.n, c.b, got, c.want/2)
		}
	}
}

func TestTopologyAllReduce(t *testing.T) {
	intra, inter := Link{Beta: 100e9}, Link{Alpha: 1e-5, Beta: 25e9}
	for _, c := range []struct {
		name string
		top  Topology
		b    float64
		want float64
	}{
		{"one host", Topology{1, 8, 8, intra, inter}, 1e9, 2 * 7.0 / 8 * 1e9 / 100e9},
		{"one rank per host", Topology{4, 1, 1, intra, inter}, 1e9, 2*3.0/4*1e9/25e9 + 6e-5},
		{"rails split the inter phase", Topology{4, 8, 8, intra, inter}, 1e9,
			2*7.0/8*1e9/100e9 + 2*3.0/4*1e9/8/25e9 + 6e-5},
		{"one leader per host", Topology{2, 2, 1, intra, inter}, 1e9, 1e9/100e9 + 1e9/25e9 + 2e-5},
	} {
		if got := c.top.AllReduce(c.b); !near(got, c.want) {
			t.Errorf("%s: AllReduce = %g, want %g", c.name, got, c.want)
		}
	}
}

func TestBuckets(t *testing.T) {
	const MiB = 1 << 20
	ls := func(mib ...float64) []Layer {
		var out []Layer
		for _, m := range mib {
			out = append(out, Layer{Bytes: int(m * MiB)})
		}
		return out
	}
	for _, c := range []struct {
		name      string
		layers    []Layer
		first, cp int
		last      int
		want      []int
	}{
		{"first bucket closes at 1 MiB", ls(0.5, 0.6, 3, 3), MiB, 25 * MiB, 0, []int{2}},
		{"cap", ls(2, 10, 10, 10, 10), MiB, 25 * MiB, 0, []int{1, 4}},
		{"tail cut of 1 MiB", ls(2, 10, 10, 0.5, 0.6), MiB, 25 * MiB, MiB, []int{1, 3}},
		{"single layer", ls(40), MiB, 25 * MiB, MiB, nil},
	} {
		got := Buckets(c.layers, c.first, c.cp, c.last)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: cuts %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDDPOverlap(t *testing.T) {
	// Two layers of 1 s backward, 1 GB each, one bucket each; link: 1 s per all-reduce.
	p := Profile{Forward: 1, Layers: []Layer{{Backward: 1, Bytes: 1e9}, {Backward: 1, Bytes: 1e9}}}
	top := Topology{Hosts: 2, PerHost: 1, Rails: 1, Inter: Link{Beta: 1e9}}
	for _, c := range []struct {
		name string
		cuts []int
		want float64 // step seconds
	}{
		{"bucket per layer: first all-reduce hidden", []int{1}, 4}, // backward ends 3; ar0 2..3, ar1 3..4
		{"one bucket: nothing hidden", nil, 5},                     // backward ends 3; 2 GB all-reduce 3..5
	} {
		s, err := DDP(p, top, c.cuts)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.Time, c.want) || !near(s.Efficiency, 3/c.want) {
			t.Errorf("%s: step %g s eff %g, want %g s eff %g", c.name, s.Time, s.Efficiency, c.want, 3/c.want)
		}
	}
}

func TestZeRO3NoLinkCostIsCompute(t *testing.T) {
	p := Profile{Forward: 1, Optimizer: 0.5, Layers: []Layer{{Backward: 1, Bytes: 8}, {Backward: 1, Bytes: 8}}}
	top := Topology{Hosts: 1, PerHost: 1, Rails: 1, Intra: Link{Beta: 1}}
	s, err := ZeRO3(p, top)
	if err != nil {
		t.Fatal(err)
	}
	if !near(s.Time, 3.5) { // world 1: no collectives, optimizer on the whole (1/1) shard
		t.Errorf("ZeRO-3 world 1 step %g s, want 3.5", s.Time)
	}
}
