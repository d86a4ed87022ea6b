package nn

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [Autocast of gorgonia's ops]
//
// Modules autocast their own ops (Builder.Autocast before, Builder.AutocastOutput after);
// gorgonia's ops in a build function cannot call anything. So, under WithAutocast, Compile
// rewrites the graph the build function returned, before it differentiates: it walks the
// nodes the loss and the named outputs need, leaves first, and
//
//   - every lower-precision op that the build function did not mark is re-created with
//     G.ApplyOp on its float32 inputs cast by the policy (CastInput, at the node the values
//     come from: above the reshapes, transposes and im2col that lead to the op, see
//     castInput) and its output cast (CastOutput), with the path "" (the graph's root:
//     Except(...) does not reach these ops, and a policy off at the root, as amp's
//     Only(...) is, leaves the graph as it is);
//   - every node downstream of a rewritten one is re-created on the rewritten inputs, with
//     the same op; leaves, inputs, learnables, their taps and hooks are upstream and stay;
//   - the loss and the named outputs (Builder.Output) become the rewritten nodes. The
//     replaced nodes stay in Builder.Graph, unreached: a node the build function kept in a
//     variable is not what runs, so read values through Builder.Output.
//
// The lower-precision ops are PyTorch's list as gorgonia spells it: G.Mul of matrices and
// vectors (torch.matmul: mm, mv, dot), G.BatchedMatMul (bmm), G.Tensordot, the product
// G.Conv2d and G.Conv1d build after im2col (conv), and ops.Linear and ops.Conv2d used
// directly. G.OuterProd is torch.outer, which is on no list, and stays float32, as do
// float64 products (PyTorch casts float32 tensors only). gorgonia's op types are
// unexported, so they are recognised by the types of the ops G.Mul, G.BatchedMatMul,
// G.Tensordot and G.OuterProd build once on a scratch graph (opKinds), whatever gorgonia
// names them; where those cannot be built, or the outer product is not of the matrix
// product's type, Compile refuses autocast rather than guess.
//
// An op is marked, and left as it is, when AutocastOutput was called on its output (or on a
// reshape or transpose of it, as G.Conv2d returns), which is what modules do whether or not
// the policy is on for their path, or when each of its float32 inputs is a node
// Builder.Autocast returned (directly or through reshape, transpose and im2col): a module
// already cast it, or the user did by hand, and it is never cast twice. A node's casts
// are shared by every op that reads it (the policy caches them, as amp's does), and
// gorgonia dedupes a re-created node whose op and inputs did not change into the node
// itself.
//
// An op that cannot be rewritten is an error naming it and the call that marks it by hand:
// a product whose result is a scalar (G.Mul of two vectors, a G.Tensordot over every axis)
// cannot be rounded, since amp's rounding takes tensors and gorgonia's vector dot cannot be
// differentiated through a reshape of its result to a tensor and back (its backward fails
// on the 0-dim tensor gradient). Nothing is skipped silently.

// autocastMarks records what the build function's own autocast calls decided.
type autocastMarks struct {
	in      map[*G.Node]bool // nodes Builder.Autocast returned: inputs of an op already cast
	decided map[*G.Node]bool // nodes given to Builder.AutocastOutput: outputs of marked ops
}

func (m *autocastMarks) markIn(n *G.Node) {
	if m.in == nil {
		m.in = map[*G.Node]bool{}
	}
	m.in[n] = true
}

func (m *autocastMarks) markDecided(n *G.Node) {
	if m.decided == nil {
		m.decided = map[*G.Node]bool{}
	}
	m.decided[n] = true
}

// autocastGraph applies the autocast policy to the lower-precision ops of b.Graph that the
// build function did not mark (see Note [Autocast of gorgonia's ops]) and returns the node
// that replaces loss. Without a policy it changes nothing and returns loss.
func (b *Builder) autocastGraph(loss *G.Node) (*G.Node, error) {
	if b.cfg.cast == nil {
		return loss, nil
	}
	if e, ok := b.cfg.cast.(interface{ Enabled(path string) bool }); ok && !e.Enabled("") {
		return loss, nil // off at the root (amp's Only): gorgonia's ops stay float32
	}
	kinds, err := gorgoniaKinds()
	if err != nil {
		return nil, err
	}
	var roots G.Nodes
	if loss != nil {
		roots = append(roots, loss)
	}
	names := sortedNames(b.outputs)
	for _, name := range names {
		roots = append(roots, b.outputs[name])
	}
	if len(roots) == 0 {
		return loss, nil
	}
	order, err := G.Sort(b.Graph) // consumers before their inputs
	if err != nil {
		return nil, fmt.Errorf("nn: autocast: sorting the graph: %w", err)
	}
	rw := rewriter{b: b, kinds: kinds, repl: map[*G.Node]*G.Node{}, decided: kinds.expandDecided(b.Graph, b.marks.decided)}
	need := ancestors(b.Graph, roots)
	for i := len(order) - 1; i >= 0; i-- {
		if n := order[i]; n.Op() != nil && need[n] {
			if err := rw.visit(n); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range names {
		b.outputs[name] = rw.get(b.outputs[name])
	}
	if loss == nil {
		return nil, nil
	}
	return rw.get(loss), nil
}

type rewriter struct {
	b       *Builder
	kinds   *opKinds
	repl    map[*G.Node]*G.Node // node -> the node that replaces it
	decided map[*G.Node]bool
}

func (r *rewriter) get(n *G.Node) *G.Node {
	if m, ok := r.repl[n]; ok {
		return m
	}
	return n
}

// visit re-creates n where an input was replaced, and autocasts it where it is a
// lower-precision op nobody marked. Its inputs have been visited.
func (r *rewriter) visit(n *G.Node) error {
	old := inputsOf(r.b.Graph, n)
	in := make(G.Nodes, len(old))
	changed := false
	for i, c := range old {
		in[i] = r.get(c)
		changed = changed || in[i] != c
	}
	if !r.kinds.lowerPrecision(n.Op()) || r.decided[n] || !isFloat32(n) || r.castByHand(old) {
		if changed {
			m, err := G.ApplyOp(n.Op(), in...)
			if err != nil {
				return fmt.Errorf("nn: autocast: re-creating %v (node %s) on its autocast inputs: %w", n.Op(), n.Name(), err)
			}
			r.repl[n] = m
		}
		return nil
	}
	if n.IsScalar() {
		return fmt.Errorf("nn: autocast: %v (node %s) is a product whose result is a scalar, which autocast cannot round: "+
			"cast its inputs by hand with b.Autocast(path, inputs...) before the op (it then reads rounded values and returns float32), "+
			"or write it as a product of matrices", n.Op(), n.Name())
	}
	policy := r.b.cfg.cast
	for i, c := range in {
		if c.IsScalar() || !isFloat32(c) {
			continue
		}
		cast, err := r.castInput(c)
		if err != nil {
			return fmt.Errorf("nn: autocast: input %d of %v (node %s): %w; mark the op by hand with b.Autocast and b.AutocastOutput", i, n.Op(), n.Name(), err)
		}
		in[i] = cast
	}
	m, err := G.ApplyOp(n.Op(), in...)
	if err != nil {
		return fmt.Errorf("nn: autocast: %v (node %s) on its cast inputs: %w; mark the op by hand with b.Autocast and b.AutocastOutput", n.Op(), n.Name(), err)
	}
	out, err := policy.CastOutput(r.b, "", m)
	if err != nil {
		return fmt.Errorf("nn: autocast: the output of %v (node %s): %w; mark the op by hand with b.Autocast and b.AutocastOutput", n.Op(), n.Name(), err)
	}
	r.repl[n] = out
	return nil
}

// castInput casts an input of a lower-precision op where its values come from: through
// the reshapes, transposes and im2col between them and the op (G.Conv2d's operands are
// reshape(im2col(x)) and reshape(w)), which it re-creates on the cast. So G.Conv2d casts x
// and w, as nn's Conv2d does: the cast costs a pass over x rather than over the k·k times
// larger im2col matrix, and in backward the gradient of x is rounded once, after im2col's
// backward sums it, rather than each of its k·k terms.
func (r *rewriter) castInput(c *G.Node) (*G.Node, error) {
	var views G.Nodes // from the op's input up to the source
	src := c
	for src.Op() != nil && r.kinds.view(src.Op()) {
		in := inputsOf(r.b.Graph, src)
		if len(in) != 1 || in[0].IsScalar() || !isFloat32(in[0]) {
			break
		}
		views = append(views, src)
		src = in[0]
	}
	cast, err := r.b.cfg.cast.CastInput(r.b, "", src)
	if err != nil || cast == src {
		return c, err // off, or already cast: the input as it is
	}
	for i := len(views) - 1; i >= 0; i-- {
		if cast, err = G.ApplyOp(views[i].Op(), cast); err != nil {
			return nil, fmt.Errorf("re-creating %v on the cast of %s: %w", views[i].Op(), src.Name(), err)
		}
	}
	return cast, nil
}

// castByHand reports whether every float32 tensor input of an op is a node Builder.Autocast
// returned, directly or through ops that only move values (the im2col of G.Conv2d).
func (r *rewriter) castByHand(in G.Nodes) bool {
	some := false
	for _, c := range in {
		if c.IsScalar() || !isFloat32(c) {
			continue
		}
		for !r.b.marks.in[c] && c.Op() != nil && r.kinds.view(c.Op()) {
			in := inputsOf(r.b.Graph, c)
			if len(in) != 1 {
				break
			}
			c = in[0]
		}
		if !r.b.marks.in[c] {
			return false
		}
		some = true
	}
	return some
}

func isFloat32(n *G.Node) bool {
	switch t := n.Type().(type) {
	case tensor.Dtype:
		return t == tensor.Float32
	case G.TensorType:
		return t.Of == tensor.Float32
	}
	return false
}

// inputsOf lists n's inputs in order (gorgonia's From keeps the op's argument order).
func inputsOf(g *G.ExprGraph, n *G.Node) G.Nodes {
	var in G.Nodes
	for it := g.From(n.ID()); it != nil && it.Next(); {
		in = append(in, it.Node().(*G.Node))
	}
	return in
}

// ancestors marks the nodes roots depend on, roots included.
func ancestors(g *G.ExprGraph, roots G.Nodes) map[*G.Node]bool {
	seen := map[*G.Node]bool{}
	stack := append(G.Nodes(nil), roots...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		stack = append(stack, inputsOf(g, n)...)
	}
	return seen
}

// opKinds recognises gorgonia's ops by the types of ops built on a scratch graph.
type opKinds struct {
	products map[reflect.Type]bool // matrix products (G.Mul, G.BatchedMatMul), G.Tensordot
	outer    G.Op                  // G.OuterProd's op, of the matrix products' type
	views    map[reflect.Type]bool // G.Reshape, G.Transpose, G.Im2Col: values moved, not computed
	shapes   map[reflect.Type]bool // G.Reshape, G.Transpose: what G.Conv2d puts after its product
}

// gorgoniaKinds builds the exemplar ops once. Callers hold compileMu (gorgonia's graph
// construction is not safe for concurrent use).
var gorgoniaKinds = sync.OnceValues(func() (*opKinds, error) {
	k := &opKinds{products: map[reflect.Type]bool{}, views: map[reflect.Type]bool{}, shapes: map[reflect.Type]bool{}}
	g := G.NewGraph()
	m := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("m"))
	v := G.NewVector(g, tensor.Float32, G.WithShape(2), G.WithName("v"))
	t := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 2, 2), G.WithName("t"))
	im := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 2, 2), G.WithName("im"))
	add := func(set map[reflect.Type]bool, what string, n *G.Node, err error) error {
		if err != nil || n == nil || n.Op() == nil {
			return fmt.Errorf("nn: autocast: recognising gorgonia's %s: %v", what, err)
		}
		set[reflect.TypeOf(n.Op())] = true
		return nil
	}
	mm, err := G.Mul(m, m)
	if err := add(k.products, "matrix product (G.Mul)", mm, err); err != nil {
		return nil, err
	}
	bmm, err := G.BatchedMatMul(t, t)
	if err := add(k.products, "batched product (G.BatchedMatMul)", bmm, err); err != nil {
		return nil, err
	}
	td, err := G.Tensordot([]int{1}, []int{0}, m, m)
	if err := add(k.products, "G.Tensordot", td, err); err != nil {
		return nil, err
	}
	op, err := G.OuterProd(v, v)
	if err := add(map[reflect.Type]bool{}, "G.OuterProd", op, err); err != nil {
		return nil, err
	}
	k.outer = op.Op()
	if !k.products[reflect.TypeOf(k.outer)] || !reflect.TypeOf(k.outer).Comparable() {
		return nil, fmt.Errorf("nn: autocast: gorgonia's outer product is not its matrix product's op (%T, %T): this gorgonia is not one autocast knows", k.outer, mm.Op())
	}
	rs, err := G.Reshape(m, tensor.Shape{4})
	if err := add(k.shapes, "G.Reshape", rs, err); err != nil {
		return nil, err
	}
	tr, err := G.Transpose(m)
	if err := add(k.shapes, "G.Transpose", tr, err); err != nil {
		return nil, err
	}
	for typ := range k.shapes {
		k.views[typ] = true
	}
	col, err := G.Im2Col(im, tensor.Shape{1, 1}, []int{0, 0}, []int{1, 1}, []int{1, 1})
	if err := add(k.views, "G.Im2Col", col, err); err != nil {
		return nil, err
	}
	return k, nil
})

// lowerPrecision reports whether op is on the lower-precision list.
func (k *opKinds) lowerPrecision(op G.Op) bool {
	if d, ok := ops.Describe(op); ok {
		return d.Kind == ops.KindLinear || d.Kind == ops.KindConv2d
	}
	typ := reflect.TypeOf(op)
	if !k.products[typ] {
		return false
	}
	// Compare only ops of the outer product's type, which is comparable (checked above).
	return typ != reflect.TypeOf(k.outer) || op != k.outer
}

func (k *opKinds) view(op G.Op) bool { return k.views[reflect.TypeOf(op)] }

// expandDecided adds, for each node AutocastOutput was given, the ops under it through
// reshapes and transposes (G.Conv2d returns its product so).
func (k *opKinds) expandDecided(g *G.ExprGraph, marked map[*G.Node]bool) map[*G.Node]bool {
	out := map[*G.Node]bool{}
	for n := range marked {
		for {
			out[n] = true
			if n.Op() == nil || !k.shapes[reflect.TypeOf(n.Op())] {
				break
			}
			in := inputsOf(g, n)
			if len(in) != 1 {
				break
			}
			n = in[0]
		}
	}
	return out
}
