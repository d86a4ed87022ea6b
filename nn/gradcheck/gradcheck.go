// Package gradcheck checks gorgonia ops' symbolic gradients against central finite
// differences in float64, and an op's float32 results against its float64 results.
//
// Every op the project owns (nn/ops) and every model block passes these checks in the
// tests; do not trust a gorgonia built-in op that has not passed them (see docs/DESIGN.md §1).
package gradcheck

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BuildFunc builds the graph under test into g with the given dtype (Float64 or Float32).
// It returns the leaf inputs to differentiate (nodes whose values it set, for example with
// G.WithValue) and the output node. Values must come from rng so that the float64 and float32
// builds see the same numbers (Rand does that).
type BuildFunc func(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand) (inputs G.Nodes, out *G.Node, err error)

// Result is the outcome of a gradient check.
type Result struct {
	// MaxRel is the largest relative error |num-an| / max(floor, |num|+|an|) seen.
	MaxRel float64
	// Checked is the number of coordinates compared.
	Checked int
	// Worst describes the worst coordinate ("input 1 [17]: numeric 0.31 analytic 0.29").
	Worst string
}

func (r Result) String() string {
	return fmt.Sprintf("max rel err %.3g over %d coords (worst %s)", r.MaxRel, r.Checked, r.Worst)
}

// Options tune a check. The zero value is usable.
type Options struct {
	// Samples is the number of coordinates checked per input (all if the input is smaller).
	// Default 64.
	Samples int
	// Eps is the finite-difference step. Default 1e-6.
	Eps float64
	// Floor is the smallest denominator of the relative error, so that gradients that are
	// zero analytically and numerically do not divide by zero. Default 1e-6.
	Floor float64
	// Seed seeds the input values, the projection and the sampled coordinates. Default 1.
	Seed int64
}

func (o *Options) defaults() {
	if o.Samples == 0 {
		o.Samples = 64
	}
	if o.Eps == 0 {
		o.Eps = 1e-6
	}
	if o.Floor == 0 {
		o.Floor = 1e-6
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Rand returns a dense tensor of the given dtype with N(0,1) entries drawn from rng; the
// float32 and float64 versions drawn from equal seeds hold the same values (up to rounding).
func Rand(rng *rand.Rand, dt tensor.Dtype, shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return FromFloat64(dt, v, shape...)
}

// FromFloat64 returns a dense tensor of dtype dt (Float32 or Float64) holding v.
func FromFloat64(dt tensor.Dtype, v []float64, shape ...int) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
}

// Input returns a leaf node of dtype dt with N(0,1) values drawn from rng.
func Input(g *G.ExprGraph, dt tensor.Dtype, rng *rand.Rand, name string, shape ...int) *G.Node {
	return G.NewTensor(g, dt, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(Rand(rng, dt, shape...)))
}

// Check compares the symbolic gradient of cost = sum(out ⊙ R), R a fixed random tensor, with
// respect to every input against central finite differences, in float64.
func Check(build BuildFunc, opts Options) (res Result, err error) {
	opts.defaults()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gradcheck: panic: %v", r)
		}
	}()
	rng := rand.New(rand.NewSource(opts.Seed))
	g := G.NewGraph()
	inputs, out, err := build(g, tensor.Float64, rng)
	if err != nil {
		return res, fmt.Errorf("gradcheck: build: %w", err)
	}
	cost, err := projection(g, out, tensor.Float64, rng)
	if err != nil {
		return res, err
	}
	grads, err := G.Grad(cost, inputs...)
	if err != nil {
		return res, fmt.Errorf("gradcheck: Grad: %w", err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		return res, fmt.Errorf("gradcheck: run: %w", err)
	}
	analytic := make([][]float64, len(inputs))
	for i, gn := range grads {
		v, err := values64(gn.Value())
		if err != nil {
			return res, fmt.Errorf("gradcheck: gradient of input %d (%s): %w", i, inputs[i].Name(), err)
		}
		analytic[i] = v
	}
	m.Reset()
	eval := func() (float64, error) {
		defer m.Reset()
		if err := m.RunAll(); err != nil {
			return 0, err
		}
		return cost.Value().Data().(float64), nil
	}
	for i, in := range inputs {
		data, ok := in.Value().Data().([]float64)
		if !ok {
			return res, fmt.Errorf("gradcheck: input %d (%s) is not float64", i, in.Name())
		}
		idx := rng.Perm(len(data))
		if len(idx) > opts.Samples {
			idx = idx[:opts.Samples]
		}
		for _, j := range idx {
			orig := data[j]
			data[j] = orig + opts.Eps
			cp, err := eval()
			if err != nil {
				return res, fmt.Errorf("gradcheck: run: %w", err)
			}
			data[j] = orig - opts.Eps
			cm, err := eval()
			if err != nil {
				return res, fmt.Errorf("gradcheck: run: %w", err)
			}
			data[j] = orig
			num := (cp - cm) / (2 * opts.Eps)
			an := analytic[i][j]
			rel := math.Abs(num-an) / math.Max(opts.Floor, math.Abs(num)+math.Abs(an))
			if rel > res.MaxRel || math.IsNaN(rel) {
				res.MaxRel = rel
				res.Worst = fmt.Sprintf("input %d (%s) [%d]: numeric %.6g analytic %.6g", i, in.Name(), j, num, an)
			}
			res.Checked++
		}
	}
	return res, nil
}

// Precision runs build in float64 and float32 on the same inputs and returns the largest
// norm-wise relative difference ||a32-a64|| / ||a64|| over the output and every input gradient.
func Precision(build BuildFunc, seed int64) (maxRel float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gradcheck: panic: %v", r)
		}
	}()
	run := func(dt tensor.Dtype) ([][]float64, error) {
		rng := rand.New(rand.NewSource(seed))
		g := G.NewGraph()
		inputs, out, err := build(g, dt, rng)
		if err != nil {
			return nil, fmt.Errorf("build %v: %w", dt, err)
		}
		cost, err := projection(g, out, dt, rng)
		if err != nil {
			return nil, err
		}
		grads, err := G.Grad(cost, inputs...)
		if err != nil {
			return nil, fmt.Errorf("Grad %v: %w", dt, err)
		}
		m := G.NewTapeMachine(g)
		defer m.Close()
		if err := m.RunAll(); err != nil {
			return nil, fmt.Errorf("run %v: %w", dt, err)
		}
		var res [][]float64
		for _, n := range append(G.Nodes{out}, grads...) {
			v, err := values64(n.Value())
			if err != nil {
				return nil, err
			}
			res = append(res, v)
		}
		return res, nil
	}
	a64, err := run(tensor.Float64)
	if err != nil {
		return 0, fmt.Errorf("gradcheck: %w", err)
	}
	a32, err := run(tensor.Float32)
	if err != nil {
		return 0, fmt.Errorf("gradcheck: %w", err)
	}
	for i := range a64 {
		if r := RelNorm(a32[i], a64[i]); r > maxRel || math.IsNaN(r) {
			maxRel = r
		}
	}
	return maxRel, nil
}

// RelNorm returns ||got-want|| / max(||want||, tiny): the norm-wise relative error.
func RelNorm(got, want []float64) float64 {
	var d, w float64
	for i := range want {
		e := got[i] - want[i]
		d += e * e
		w += want[i] * want[i]
	}
	return math.Sqrt(d) / math.Max(math.Sqrt(w), 1e-30)
}

func projection(g *G.ExprGraph, out *G.Node, dt tensor.Dtype, rng *rand.Rand) (*G.Node, error) {
	shape := out.Shape().Clone()
	if shape.IsScalar() {
		return out, nil
	}
	r := G.NewTensor(g, dt, shape.Dims(), G.WithShape(shape...), G.WithName("gradcheck.R"), G.WithValue(Rand(rng, dt, shape...)))
	prod, err := G.HadamardProd(out, r)
	if err != nil {
		return nil, fmt.Errorf("gradcheck: projection: %w", err)
	}
	cost, err := G.Sum(prod)
	if err != nil {
		return nil, fmt.Errorf("gradcheck: projection: %w", err)
	}
	return cost, nil
}

func values64(v G.Value) ([]float64, error) {
	if v == nil {
		return nil, fmt.Errorf("no value")
	}
	switch d := v.Data().(type) {
	case []float64:
		return append([]float64(nil), d...), nil
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out, nil
	case float64:
		return []float64{d}, nil
	case float32:
		return []float64{float64(d)}, nil
	}
	return nil, fmt.Errorf("unsupported value %T", v.Data())
}
