// Package gsolver makes the state of gorgonia's solvers checkpointable: the moments,
// caches, step count and learning rate of VanillaSolver, Momentum, AdamSolver,
// RMSPropSolver and AdaGradSolver, saved and restored through checkpoint.Stateful for a
// bit-identical resume, and their learning rate driven by optim's schedulers.
//
// gorgonia keeps that state in unexported fields; gsolver reads and writes them by name
// and type (fields.go) and refuses, when Of is called, a solver whose layout is not the
// one it knows, so that a program learns at its start, not at its first checkpoint, that
// its solver cannot be saved.
//
// A solver wrapped for several ranks (ddp.NewSolver) is checkpointed through the solver it
// wraps: Of(inner), every rank holding the same state.
package gsolver

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrUnsupported is wrapped by Of's error for a solver whose state cannot be captured.
var ErrUnsupported = errors.New("gsolver: solver state cannot be captured")

// KeyPrefix starts every key of a State's state dict ("optim.gorgonia.adam.iter", ...):
// under checkpoint's reserved "optim." prefix, so never taken for model state.
const KeyPrefix = "optim.gorgonia."

// State is a gorgonia solver's state as a checkpoint.Stateful and an optim.LRTarget. It
// reads and writes the solver it was made from; use it from the goroutine that steps the
// solver, between steps.
//
// Its state dict holds "optim.gorgonia.KIND.lr" (the learning rate), for AdamSolver
// "optim.gorgonia.adam.iter", and, for the solvers with a per-learnable cache, its length
// "optim.gorgonia.KIND.cache" and each entry's two tensors "optim.gorgonia.KIND.cache.I.value"
// and "optim.gorgonia.KIND.cache.I.d" (float32 or float64, the learnable's shape). A
// restored cache is used by the solver's next Step for the learnables in the order that
// Step is given them: restore into a solver that steps the same learnables in the same
// order (LoadStateDict checks the count against Expect when set).
type State struct {
	kind string
	s    fields
	// want, when set by Expect, is the number of learnables the solver steps.
	want int
}

// Of returns the state of s, one of gorgonia's VanillaSolver, Momentum, AdamSolver,
// RMSPropSolver or AdaGradSolver (pointers, as their constructors return them). Any other
// solver, or one of these whose fields are not laid out as gorgonia v0.9.18 lays them out,
// is refused with an error wrapping ErrUnsupported that names its type: call Of when the
// solver is chosen, before training.
func Of(s G.Solver) (*State, error) {
	kind, ok := kinds[reflect.TypeOf(s)]
	if !ok {
		return nil, fmt.Errorf("%w: %T is not one of gorgonia's %s; give one of them, or an optimizer of package optim",
			ErrUnsupported, s, strings.Join(kindNames(), ", "))
	}
	f, err := open(s, kind)
	if err != nil {
		return nil, fmt.Errorf("%w: %T: %w", ErrUnsupported, s, err)
	}
	return &State{kind: kind.name, s: f}, nil
}

// Expect sets the number of learnables the solver steps, which LoadStateDict then checks
// a restored cache against (a shorter cache would fail inside gorgonia's Step).
func (st *State) Expect(learnables int) { st.want = learnables }

// LR is the solver's learning rate (its eta).
func (st *State) LR() float64 { return st.s.eta.Float() }

// SetLR changes the solver's learning rate; optim's schedulers call it.
func (st *State) SetLR(lr float64) { st.s.eta.SetFloat(lr) }

func (st *State) key(k string) string { return KeyPrefix + st.kind + "." + k }

// StateDict returns the solver's state; the cache entries alias the solver's tensors. An
// entry that is not a float32 or float64 *tensor.Dense (a scalar learnable's gorgonia
// value) is left out, and LoadStateDict then reports it missing.
func (st *State) StateDict() []nn.StateEntry {
	out := []nn.StateEntry{{Name: st.key("lr"), Shape: []int{}, F64: []float64{st.LR()}}}
	if st.s.iter.IsValid() {
		out = append(out, nn.StateEntry{Name: st.key("iter"), Shape: []int{}, I64: []int64{st.s.iter.Int()}})
	}
	if !st.s.cache.IsValid() {
		return out
	}
	n := int64(-1) // no cache yet: the solver has not stepped
	if !st.s.cache.IsNil() {
		n = int64(st.s.cache.Len())
	}
	out = append(out, nn.StateEntry{Name: st.key("cache"), Shape: []int{}, I64: []int64{n}})
	for i := 0; i < int(n); i++ {
		value, d, ok := cacheAt(st.s.cache, i)
		if !ok {
			continue
		}
		for _, e := range []struct {
			name string
			v    G.Value
		}{{"value", value}, {"d", d}} {
			if entry, ok := entryOf(st.key(fmt.Sprintf("cache.%d.%s", i, e.name)), e.v); ok {
				out = append(out, entry)
			}
		}
	}
	return out
}

// LoadStateDict restores the state StateDict saved from a solver of the same kind. Nothing
// is changed when it returns an error, which names the missing or mismatched key.
func (st *State) LoadStateDict(entries []nn.StateEntry) error {
	idx := make(map[string]nn.StateEntry, len(entries))
	for _, e := range entries {
		idx[e.Name] = e
	}
	lr, ok := idx[st.key("lr")]
	if !ok || len(lr.F64) != 1 {
		return fmt.Errorf("gsolver: %s missing or not one float64: not a checkpoint of a gorgonia %s solver (its optimizer keys: %s)",
			st.key("lr"), st.kind, optimizerKeys(entries))
	}
	var iter int64
	if st.s.iter.IsValid() {
		e, ok := idx[st.key("iter")]
		if !ok || len(e.I64) != 1 {
			return fmt.Errorf("gsolver: %s missing or not one int64", st.key("iter"))
		}
		iter = e.I64[0]
	}
	var cache reflect.Value
	if st.s.cache.IsValid() {
		var err error
		if cache, err = st.loadCache(idx); err != nil {
			return err
		}
	}
	st.SetLR(lr.F64[0])
	if st.s.iter.IsValid() {
		st.s.iter.SetInt(iter)
	}
	if st.s.cache.IsValid() {
		st.s.cache.Set(cache)
	}
	return nil
}

// loadCache builds the cache saved in idx, without touching the solver's.
func (st *State) loadCache(idx map[string]nn.StateEntry) (reflect.Value, error) {
	e, ok := idx[st.key("cache")]
	if !ok || len(e.I64) != 1 {
		return reflect.Value{}, fmt.Errorf("gsolver: %s missing or not one int64", st.key("cache"))
	}
	n := int(e.I64[0])
	if n < 0 {
		return reflect.Zero(st.s.cache.Type()), nil // saved before the first step
	}
	if st.want > 0 && n != st.want {
		return reflect.Value{}, fmt.Errorf("gsolver: %s: the checkpoint's solver stepped %d learnables, this one steps %d (a checkpoint of another model?)",
			st.key("cache"), n, st.want)
	}
	cache := reflect.MakeSlice(st.s.cache.Type(), n, n)
	for i := range n {
		var vals [2]G.Value
		for j, name := range []string{"value", "d"} {
			k := st.key(fmt.Sprintf("cache.%d.%s", i, name))
			e, ok := idx[k]
			if !ok {
				return reflect.Value{}, fmt.Errorf("gsolver: %s missing (the checkpoint holds %d cache entries)", k, n)
			}
			v, err := denseOf(e)
			if err != nil {
				return reflect.Value{}, fmt.Errorf("gsolver: %s: %w", k, err)
			}
			vals[j] = v
		}
		cache.Index(i).Set(newDual(st.s.cache.Type().Elem(), vals[0], vals[1]))
	}
	return cache, nil
}

// entryOf is v as a state entry aliasing its data; false for a value that is not a float32
// or float64 *tensor.Dense.
func entryOf(name string, v G.Value) (nn.StateEntry, bool) {
	t, ok := v.(*tensor.Dense)
	if !ok || t == nil {
		return nn.StateEntry{}, false
	}
	shape := append([]int{}, t.Shape()...)
	switch data := t.Data().(type) {
	case []float32:
		return nn.StateEntry{Name: name, Shape: shape, F32: data}, true
	case []float64:
		return nn.StateEntry{Name: name, Shape: shape, F64: data}, true
	}
	return nn.StateEntry{}, false
}

// denseOf is a copy of e as a tensor.
func denseOf(e nn.StateEntry) (*tensor.Dense, error) {
	shape := append([]int{}, e.Shape...)
	switch {
	case e.F32 != nil:
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float32(nil), e.F32...))), nil
	case e.F64 != nil:
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), e.F64...))), nil
	}
	return nil, fmt.Errorf("neither float32 nor float64 (shape %v)", e.Shape)
}

// optimizerKeys lists the "optim." keys of entries (at most 8), for an error.
func optimizerKeys(entries []nn.StateEntry) string {
	var ks []string
	for _, e := range entries {
		if !checkpoint.IsModelKey(e.Name) && strings.HasPrefix(e.Name, "optim.") {
			ks = append(ks, e.Name)
		}
	}
	switch {
	case len(ks) == 0:
		return "none"
	case len(ks) > 8:
		return strings.Join(ks[:8], ", ") + ", ..."
	}
	return strings.Join(ks, ", ")
}

var _ checkpoint.Stateful = (*State)(nil)
