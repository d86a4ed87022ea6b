// Package scaling predicts data-parallel step time and efficiency (DDP with gradient buckets,
// ZeRO-3) from a per-layer backward profile, a bucket layout and an α–β link model.
package scaling

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/internal/bucketcut"
)

// Link is the α–β model of one link: a message of b bytes costs Alpha + b/Beta seconds.
// Beta is in bytes per second, per direction.
type Link struct {
	Alpha float64 // seconds per message (latency)
	Beta  float64 // bytes per second
}

// Ring is the ring all-reduce time of b bytes over n ranks: 2(n−1)/n·b/β + 2(n−1)·α.
func (l Link) Ring(n int, b float64) float64 {
	if n < 2 {
		return 0
	}
	k := float64(n - 1)
	return 2*k/float64(n)*b/l.Beta + 2*k*l.Alpha
}

// Half is the ring reduce-scatter or all-gather time of a b-byte buffer over n ranks:
// (n−1)/n·b/β + (n−1)·α.
func (l Link) Half(n int, b float64) float64 { return l.Ring(n, b) / 2 }

// Topology is Hosts hosts of PerHost ranks. Inside a host ranks talk over Intra (shared
// memory, NVLink); hosts talk over Inter. Rails is the number of inter-host links per host
// used in parallel: 1 for one leader per host (this project's hierarchical collectives),
// PerHost for one NIC per GPU (DGX-style rails, NCCL's 2D rings).
type Topology struct {
	Hosts, PerHost, Rails int
	Intra, Inter          Link
}

// World is the number of ranks.
func (t Topology) World() int { return t.Hosts * t.PerHost }

func (t Topology) rails() float64 { return float64(max(t.Rails, 1)) }

// AllReduce is the hierarchical all-reduce time of b bytes: an all-reduce inside each host
// (ring cost over PerHost ranks on Intra) plus a ring all-reduce among hosts of b/Rails bytes
// per rail on Inter. With one host it is the intra-host ring alone.
func (t Topology) AllReduce(b float64) float64 {
	return t.Intra.Ring(t.PerHost, b) + t.Inter.Ring(t.Hosts, b/t.rails())
}

// Half is the hierarchical reduce-scatter or all-gather time of a b-byte buffer: the
// intra-host phase on b, then the inter-host phase on b/Rails.
func (t Topology) Half(b float64) float64 {
	return t.Intra.Half(t.PerHost, b) + t.Inter.Half(t.Hosts, b/t.rails())
}

// Layer is one unit of the profile: the backward compute that ends when its gradient is
// ready, and the gradient's size.
type Layer struct {
	Name     string
	Backward float64 // seconds of backward compute before this gradient arrives
	Bytes    int     // gradient bytes (fp32: 4 per element)
}

// Profile is one rank's step without communication. Layers are in backward order (the
// first to get its gradient first).
type Profile struct {
	Forward, Optimizer float64 // seconds
	Layers             []Layer
}

// Compute is forward + backward + optimizer, the step time of one rank alone.
func (p Profile) Compute() float64 {
	s := p.Forward + p.Optimizer
	for _, l := range p.Layers {
		s += l.Backward
	}
	return s
}

// Buckets cuts layers (backward order) into gradient buckets with ddp's default rule
// (bucketcut.BySize over the layers' gradient bytes): a bucket closes once it holds at least
// its limit (first for the first bucket, capBytes after); then the tail is cut so that the
// last bucket holds at least last bytes. It returns the first layer index of every bucket
// after the first.
func Buckets(layers []Layer, first, capBytes, last int) []int {
	sizes := make([]int, len(layers))
	for i, l := range layers {
		sizes[i] = l.Bytes
	}
	return bucketcut.BySize(sizes, first, capBytes, last)
}

// BucketBytes is the size of each bucket cut by cuts.
func BucketBytes(layers []Layer, cuts []int) []int {
	var out []int
	lo := 0
	for _, hi := range append(append([]int(nil), cuts...), len(layers)) {
		s := 0
		for _, l := range layers[lo:hi] {
			s += l.Bytes
		}
		out = append(out, s)
		lo = hi
	}
	return out
}

// Step is a predicted step.
type Step struct {
	Compute    float64 // seconds of one rank's step alone
	Time       float64 // seconds of the predicted distributed step
	Comm       float64 // seconds the link was busy
	Exposed    float64 // Time − Compute: communication not hidden behind compute
	Efficiency float64 // Compute / Time (throughput per rank relative to one rank alone)
}

func newStep(compute, time, comm float64) (Step, error) {
	if compute <= 0 || time <= 0 {
		return Step{}, fmt.Errorf("scaling: step of %.3g s compute, %.3g s total: want both > 0", compute, time)
	}
	return Step{Compute: compute, Time: time, Comm: comm, Exposed: time - compute, Efficiency: compute / time}, nil
}

// DDP predicts a DDP step: forward, then backward; a bucket's all-reduce starts when its last
// gradient has arrived and the link is free (one all-reduce at a time, in bucket order); the
// optimizer starts when backward and every all-reduce have finished.
func DDP(p Profile, t Topology, cuts []int) (Step, error) {
	now, free, busy := p.Forward, p.Forward, 0.0
	next := 0
	bytes := 0
	for i, l := range p.Layers {
		now += l.Backward
		bytes += l.Bytes
		if i+1 == len(p.Layers) || (next < len(cuts) && cuts[next] == i+1) {
			d := t.AllReduce(float64(bytes))
			free = max(free, now) + d
			busy += d
			bytes = 0
			next++
		}
	}
	return newStep(p.Compute(), max(now, free)+p.Optimizer, busy)
}

// ZeRO3 predicts a ZeRO-3 step with per-layer parameter shards: before each layer's forward
// and again before its backward its parameters are all-gathered, and after its backward its
// gradient is reduce-scattered. Gathers are prefetched one layer ahead; one collective at a
// time on the link, in issue order. Forward time is split over layers in proportion to their
// backward time. The optimizer runs on the shard (1/World of Optimizer) after the last
// reduce-scatter.
func ZeRO3(p Profile, t Topology) (Step, error) {
	var bwd float64
	for _, l := range p.Layers {
		bwd += l.Backward
	}
	n := len(p.Layers)
	if n == 0 || bwd <= 0 {
		return Step{}, fmt.Errorf("scaling: ZeRO-3 needs layers with backward time")
	}
	free, busy := 0.0, 0.0
	link := func(issue, d float64) float64 { free = max(free, issue) + d; busy += d; return free }
	// Forward visits layers in reverse backward order.
	now := 0.0
	order := make([]int, 0, 2*n)
	for i := n - 1; i >= 0; i-- {
		order = append(order, i)
	}
	gathered := link(0, t.Half(float64(p.Layers[order[0]].Bytes)))
	for k, i := range order {
		start := max(now, gathered)
		if k+1 < len(order) {
			gathered = link(start, t.Half(float64(p.Layers[order[k+1]].Bytes)))
		}
		now = start + p.Forward*p.Layers[i].Backward/bwd
	}
	gathered = link(now, t.Half(float64(p.Layers[0].Bytes)))
	var end float64
	for i, l := range p.Layers {
		start := max(now, gathered)
		if i+1 < n {
			gathered = link(start, t.Half(float64(p.Layers[i+1].Bytes)))
		}
		now = start + l.Backward
		end = link(now, t.Half(float64(l.Bytes)))
	}
	opt := p.Optimizer / float64(max(t.World(), 1))
	return newStep(p.Compute(), max(now, end)+opt, busy)
}
