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

// layout is how a model is cut into units and shards for a world size.
type layout struct {
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

func newLayout(ps *nn.ParamSet, world, rank int, key func(string) string) (*layout, error) {
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("zero: rank %d outside world size %d", rank, world)
	}
	l := &layout{world: world, rank: rank, psi: ps.NumParams(), unitOf: make([]int, len(ps.Params))}
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

// owned is the flat range [lo, hi) of unit u that this rank owns (empty when it owns only
// padding).
func (l *layout) owned(u *Unit) (lo, hi int) {
	lo = u.Lo + l.rank*u.Shard
	hi = min(lo+u.Shard, u.Hi)
	return lo, max(lo, hi)
}

// paddingElems is the number of shard elements that hold no parameter.
func (l *layout) paddingElems() int {
	n := 0
	for _, u := range l.units {
		lo, hi := l.owned(u)
		n += u.Shard - (hi - lo)
	}
	return n
}

// segments builds the optimizer segments of this rank's shard over master and grad (shard
// buffers): optim.Segments cuts parameters at the shard's ends and names the parts, and the
// Data/Grad views are moved from the flat buffers to the shard buffers. ps.Data must still
// be the real flat buffer.
func (l *layout) segments(ps *nn.ParamSet, wd float64, master, grad []float32) ([]optim.Segment, error) {
	var out []optim.Segment
	for _, u := range l.units {
		lo, hi := l.owned(u)
		if lo >= hi {
			continue
		}
		segs, err := optim.Segments(ps, wd, optim.InRange(lo, hi), optim.Merged())
		if err != nil {
			return nil, fmt.Errorf("zero: rank %d: segments of unit %s: %w", l.rank, u.Name, err)
		}
		for _, s := range segs {
			first := s.Parts[0]
			flat := ps.Param(first.Param).Offset + first.ParamOffset
			at := u.ShardBase + flat - lo
			n := len(s.Data)
			s.Data = master[at : at+n : at+n]
			s.Grad = grad[at : at+n : at+n]
			out = append(out, s)
		}
	}
	return out, nil
}
