package zero

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// Unit is one gather unit: a run of parameters adjacent in the flat buffer, gathered and
// reduce-scattered together.
type Unit struct {
	// Name is the unit's key ("layer1", "fc"); several runs with the same key get "#k".
	Name string
	// Params are the unit's parameters in flat-buffer order.
	Params []*nn.Param
	// Lo and Hi are the unit's flat element range in nn.ParamSet layout.
	Lo, Hi int
	// Padded is Hi-Lo rounded up to a multiple of the world size.
	Padded int
	// Shard is Padded/N: the elements of the unit each rank owns.
	Shard int
	// ShardBase is the offset of this unit's shard in a rank's shard buffers.
	ShardBase int
	// GatherBase is the offset of this unit in the gathered (padded) layout.
	GatherBase int
}

// Layout is how a model is cut into gather units and shards for one rank of a world size:
// the host engine's and the device engine's (cuda/devzero), so that both hold the same
// shards and write the same checkpoints.
type Layout struct {
	world, rank int
	psi         int
	units       []*Unit
	unitOf      []int // by Param.Index
	shardLen    int   // Σ Shard
	gatherLen   int   // Σ Padded
}

// DepthKey returns the unit key function that groups parameters by the first depth
// components of their dotted names ("layer1.0.conv1.weight" → "layer1" at depth 1).
func DepthKey(depth int) func(name string) string {
	return func(name string) string {
		parts := strings.Split(name, ".")
		if len(parts) <= depth {
			return strings.Join(parts[:max(len(parts)-1, 1)], ".")
		}
		return strings.Join(parts[:depth], ".")
	}
}

// NewLayout cuts ps into units by key (parameters adjacent in the flat buffer with equal
// keys form one unit; DepthKey(1) is the engines' default) and shards each unit over world
// ranks for rank.
func NewLayout(ps *nn.ParamSet, world, rank int, key func(string) string) (*Layout, error) {
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("zero: rank %d outside world size %d", rank, world)
	}
	l := &Layout{world: world, rank: rank, psi: ps.NumParams(), unitOf: make([]int, len(ps.Params))}
	params := slices.Clone(ps.Params)
	slices.SortFunc(params, func(a, b *nn.Param) int { return a.Offset - b.Offset })
	seen := map[string]int{}
	var cur *Unit
	curKey := ""
	for _, p := range params {
		k := key(p.Name)
		if cur == nil || k != curKey {
			name := k
			if n := seen[k]; n > 0 {
				name = fmt.Sprintf("%s#%d", k, n)
			}
			seen[k]++
			cur = &Unit{Name: name, Lo: p.Offset, Hi: p.Offset}
			curKey = k
			l.units = append(l.units, cur)
		}
		cur.Params = append(cur.Params, p)
		cur.Hi = p.Offset + p.Numel()
		l.unitOf[p.Index] = len(l.units) - 1
	}
	for _, u := range l.units {
		n := u.Hi - u.Lo
		u.Padded = (n + world - 1) / world * world
		u.Shard = u.Padded / world
		u.ShardBase, u.GatherBase = l.shardLen, l.gatherLen
		l.shardLen += u.Shard
		l.gatherLen += u.Padded
	}
	return l, nil
}

// Units are the gather units in flat-buffer order.
func (l *Layout) Units() []*Unit { return l.units }

// UnitOf is the index in Units of the unit holding the parameter with index i (Param.Index).
func (l *Layout) UnitOf(i int) int { return l.unitOf[i] }

// ShardLen is the length of a rank's shard buffers: Σ Shard over the units, padding included.
func (l *Layout) ShardLen() int { return l.shardLen }

// Owned is the flat range [lo, hi) of unit u that this rank owns (empty when it owns only
// padding); element lo is at u.ShardBase in the rank's shard buffers.
func (l *Layout) Owned(u *Unit) (lo, hi int) {
	lo = u.Lo + l.rank*u.Shard
	hi = min(lo+u.Shard, u.Hi)
	return lo, max(lo, hi)
}

// paddingElems is the number of shard elements that hold no parameter.
func (l *Layout) paddingElems() int {
	n := 0
	for _, u := range l.units {
		lo, hi := l.Owned(u)
		n += u.Shard - (hi - lo)
	}
	return n
}

// Segments builds the optimizer segments of this rank's shard over master and grad (shard
// buffers of ShardLen elements): optim.Segments cuts parameters at the shard's ends and
// names the parts, every parameter decays by wd except those marked NoWeightDecay, and the
// Data/Grad views are moved from the flat buffers to the shard buffers. It also returns
// where each segment starts in the shard buffers. ps must be the layout's.
func (l *Layout) Segments(ps *nn.ParamSet, wd float64, master, grad []float32) ([]optim.Segment, []int, error) {
	if len(master) < l.shardLen || len(grad) < l.shardLen {
		return nil, nil, fmt.Errorf("zero: rank %d: shard buffers of %d and %d elements, want %d", l.rank, len(master), len(grad), l.shardLen)
	}
	var out []optim.Segment
	var starts []int
	for _, u := range l.units {
		lo, hi := l.Owned(u)
		if lo >= hi {
			continue
		}
		segs, err := optim.Segments(ps, wd, optim.InRange(lo, hi), optim.Merged())
		if err != nil {
			return nil, nil, fmt.Errorf("zero: rank %d: segments of unit %s: %w", l.rank, u.Name, err)
		}
		for _, s := range segs {
			first := s.Parts[0]
			flat := ps.Param(first.Param).Offset + first.ParamOffset
			at := u.ShardBase + flat - lo
			n := len(s.Data)
			s.Data = master[at : at+n : at+n]
			s.Grad = grad[at : at+n : at+n]
			out = append(out, s)
			starts = append(starts, at)
		}
	}
	return out, starts, nil
}
