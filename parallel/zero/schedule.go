package zero

import (
	"maps"
	"slices"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The release schedule of a program: when each unit's gathered parameters may go and come
// back, proved from the graph's data dependencies after compilation (the tape runs a node
// only after all its inputs, whatever order it picks otherwise).
//
// A unit's readers are the nodes that read its gathered memory: consumers of its gather
// nodes and of ops that return views of them (ReturnsPtr). The unit may be released
//   - in forward, when the next unit's first gather op runs, if every forward reader is an
//     ancestor of that op and every backward reader descends from the re-gather barrier
//     the op creates in backward (see gatherOp);
//   - in backward, at a gradient-sink or barrier event e, once every reader is an ancestor
//     of e (the unit will not be read again in this run).
//
// A unit none of this can be proved for stays gathered until the end of the run, as
// before: the schedule saves memory where the graph allows it and is never wrong.
type schedule struct {
	fwdRelease []bool  // by unit: released when its forward is done
	regather   []bool  // by unit: re-gathered by its barrier (it has backward readers)
	atSink     [][]int // by Param.Index: units released when its gradient has been sunk
	atBarrier  [][]int // by unit U: units released when U's barrier has run
	dropGrad   []bool  // by Param.Index: the gradient\'s register may be released after the sink
}

// keepGathered, set by tests, turns releases off (the schedule of the previous design):
// the reference a released-and-re-gathered run must equal bit for bit.
var keepGathered bool

// link is the forward release point of unit prev: the gather op of the next unit's first
// parameter, with x as second input.
type link struct {
	node *G.Node
	op   *gatherOp
}

// frontier is the newest node of the forward graph that can carry a unit boundary: an op
// output of float32 values that is not part of a parameter's chain (leaf, tap, gather).
// Normally the previous unit's output; the schedule verifies whatever it is.
func frontier(g *G.ExprGraph) *G.Node {
	all := g.AllNodes()
	for i := len(all) - 1; i >= 0; i-- {
		n := all[i]
		op := n.Op()
		if op == nil || n.IsScalar() || n.Dims() == 0 || n.Dtype() != tensor.Float32 {
			continue
		}
		if _, ok := op.(*gatherOp); ok || strings.HasPrefix(op.String(), "Tap{") {
			continue
		}
		return n
	}
	return nil
}

// dag is an index of a graph's nodes with their inputs and consumers.
type dag struct {
	idx     map[int64]int
	nodes   []*G.Node
	in, out [][]int
}

func newDAG(g *G.ExprGraph) *dag {
	all := g.AllNodes()
	d := &dag{idx: make(map[int64]int, len(all)), nodes: all, in: make([][]int, len(all)), out: make([][]int, len(all))}
	for i, n := range all {
		d.idx[n.ID()] = i
	}
	for i, n := range all {
		it := g.From(n.ID())
		for it != nil && it.Next() {
			if c, ok := d.idx[it.Node().ID()]; ok {
				d.in[i] = append(d.in[i], c)
				d.out[c] = append(d.out[c], i)
			}
		}
	}
	return d
}

// reach marks the nodes reachable from start along adj (start included).
func (d *dag) reach(start int, adj [][]int) []bool {
	seen := make([]bool, len(d.nodes))
	stack := []int{start}
	seen[start] = true
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, j := range adj[i] {
			if !seen[j] {
				seen[j] = true
				stack = append(stack, j)
			}
		}
	}
	return seen
}

// readersOf lists the nodes that read the memory of the given gather nodes.
func (d *dag) readersOf(gathers []*G.Node) []int {
	alias := map[int]bool{}
	var queue []int
	for _, n := range gathers {
		if i, ok := d.idx[n.ID()]; ok && !alias[i] {
			alias[i] = true
			queue = append(queue, i)
		}
	}
	readers := map[int]bool{}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for _, c := range d.out[a] {
			op := d.nodes[c].Op()
			if op == nil {
				continue
			}
			if _, isGather := op.(*gatherOp); !isGather && op.ReturnsPtr() {
				if !alias[c] {
					alias[c] = true
					queue = append(queue, c)
				}
				continue
			}
			readers[c] = true
		}
	}
	return slices.Collect(maps.Keys(readers))
}

// plan proves the release schedule of p's graph (see schedule). fwdMax is the largest ID
// of a forward node: nodes created by differentiation have larger ones.
func (p *Program) plan(fwdMax int64) *schedule {
	e := p.e
	nu := len(e.lay.units)
	s := &schedule{fwdRelease: make([]bool, nu), regather: make([]bool, nu), atSink: make([][]int, len(e.Model.Params.Params)),
		atBarrier: make([][]int, nu), dropGrad: make([]bool, len(e.Model.Params.Params))}
	b := p.np.Builder
	d := newDAG(b.Graph)
	readers := make([][]int, nu)
	for _, u := range p.order {
		readers[u] = d.readersOf(p.gathers[u])
	}
	// Forward release at the next unit's first gather.
	for _, u := range p.order {
		l := p.links[u]
		if l == nil {
			continue
		}
		ri, ok := d.idx[l.node.ID()]
		if !ok {
			continue
		}
		anc := d.reach(ri, d.in)
		var desc []bool
		if l.op.barrier != nil {
			if bi, ok := d.idx[l.op.barrier.ID()]; ok && anc != nil {
				if d.reach(ri, d.out)[bi] {
					desc = d.reach(bi, d.out)
				}
			}
		}
		okAll, bwd := true, 0
		for _, r := range readers[u] {
			if d.nodes[r].ID() <= fwdMax {
				okAll = okAll && anc[r]
				continue
			}
			bwd++
			okAll = okAll && desc != nil && desc[r]
		}
		if okAll && (bwd == 0 || p.training) {
			s.fwdRelease[u] = true
			s.regather[u] = bwd > 0
		}
	}
	if keepGathered {
		clear(s.fwdRelease)
		clear(s.regather)
	}
	if !p.training {
		return s
	}
	// Backward release at the first event every reader precedes: a gradient's sink, or a
	// barrier. The register holding a parameter's gradient may lose its pages once the sink
	// has copied it when the op that made it owns its output (no view, no in-place write)
	// and nothing but the gradient hook (and barriers, which ignore values) reads it.
	type event struct {
		node int
		add  func(u int)
	}
	var events []event
	for _, prm := range b.UsedParams() {
		leaf := b.Leaf(prm)
		if leaf == nil || leaf.Deriv() == nil {
			continue
		}
		h, ok := d.idx[leaf.Deriv().ID()]
		if !ok {
			continue
		}
		k := prm.Index
		events = append(events, event{h, func(u int) { s.atSink[k] = append(s.atSink[k], u) }})
		if len(d.in[h]) != 1 {
			continue
		}
		src := d.in[h][0]
		if op := d.nodes[src].Op(); op == nil || op.ReturnsPtr() || op.OverwritesInput() >= 0 {
			continue
		}
		s.dropGrad[k] = !slices.ContainsFunc(d.out[src], func(c int) bool {
			_, barrier := d.nodes[c].Op().(*barrierOp)
			return c != h && !barrier
		})
	}
	for _, u := range p.order {
		if l := p.links[u]; l != nil && l.op.barrier != nil {
			if i, ok := d.idx[l.op.barrier.ID()]; ok {
				events = append(events, event{i, func(v int) { s.atBarrier[u] = append(s.atBarrier[u], v) }})
			}
		}
	}
	for _, ev := range events {
		anc := d.reach(ev.node, d.in)
		for _, u := range p.order {
			if s.fwdRelease[u] && !s.regather[u] || len(readers[u]) == 0 {
				continue
			}
			if !slices.ContainsFunc(readers[u], func(r int) bool { return !anc[r] }) {
				ev.add(u)
			}
		}
	}
	return s
}
