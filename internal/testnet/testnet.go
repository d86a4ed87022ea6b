// Package testnet holds the small network, the deterministic data and the comparison that
// the equivalence tests of the parallel strategies (ddp, zero, ...) share, so that they check
// the same thing the same way.
package testnet

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
)

// Side is the images' height and width (3×Side×Side); Classes the number of classes.
const (
	Side    = 6
	Classes = 5
)

// ConvNet is conv-[BN]-ReLU-conv-[BN]-ReLU-pool-flatten-linear, small enough for 2 cores;
// without BatchNorm the convolutions have biases.
func ConvNet(bn bool) nn.Module {
	var names []string
	var layers []nn.Module
	add := func(n string, m nn.Module) { names, layers = append(names, n), append(layers, m) }
	add("conv1", &nn.Conv2d{In: 3, Out: 4, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}, Bias: !bn})
	if bn {
		add("bn1", &nn.BatchNorm2d{C: 4})
	}
	add("relu1", &nn.ReLU{})
	add("conv2", &nn.Conv2d{In: 4, Out: 6, Kernel: [2]int{3, 3}, Stride: [2]int{2, 2}, Padding: [2]int{1, 1}, Bias: !bn})
	if bn {
		add("bn2", &nn.BatchNorm2d{C: 6})
	}
	add("relu2", &nn.ReLU{})
	add("pool", &nn.AdaptiveAvgPool2d{})
	add("flat", &nn.Flatten{})
	add("fc", &nn.Linear{In: 6, Out: Classes})
	return &nn.Sequential{Names: names, Layers: layers}
}

// ExtraNet is ConvNet(false) plus a Linear "extra" (3 to 2) that Forward never uses,
// declared last, so that it lies first in the flat buffer (reverse declaration order): the
// model of the unused-parameter tests.
func ExtraNet() nn.Module {
	return &withExtra{Sequential: *ConvNet(false).(*nn.Sequential), Extra: &nn.Linear{In: 3, Out: 2}}
}

type withExtra struct {
	nn.Sequential
	Extra *nn.Linear
}

func (m *withExtra) Declare(s *nn.Scope) error {
	if err := m.Sequential.Declare(s); err != nil {
		return err
	}
	return s.Child("extra", m.Extra)
}

// Classify is the graph of ConvNet on a batch: nn.Classify over 3×Side×Side images.
func Classify(batch int) nn.BuildFunc { return nn.Classify(batch, []int{3, Side, Side}, 0) }

// Batch is samples [lo,hi) of micro-batch micro of step's global batch: images (NCHW) and
// labels. Every sample is a pure function of (step, micro, index), so any split of the
// global batch over ranks sees the same data.
func Batch(step, micro, lo, hi int) (x, y []float32) {
	per := 3 * Side * Side
	for i := lo; i < hi; i++ {
		rng := rand.New(rand.NewSource(int64(step*1_000_003 + micro*10_007 + i)))
		for range per {
			x = append(x, float32(rng.NormFloat64()+0.3))
		}
		y = append(y, float32(rng.Intn(Classes)))
	}
	return x, y
}

// Inputs is what Feed fills: any program with named inputs.
type Inputs interface {
	SetInput(name string, data []float32) error
}

// Feed sets Classify's inputs ("images", "labels") to Batch(step, micro, lo, hi).
func Feed(p Inputs, step, micro, lo, hi int) error {
	x, y := Batch(step, micro, lo, hi)
	if err := p.SetInput("images", x); err != nil {
		return fmt.Errorf("testnet: images of step %d: %w", step, err)
	}
	if err := p.SetInput("labels", y); err != nil {
		return fmt.Errorf("testnet: labels of step %d: %w", step, err)
	}
	return nil
}

// Reference is what every strategy must reproduce: one process trains ConvNet(bn) (seed 1)
// for steps steps on the global batch, samples [0, batch) of Batch, accumulating micro
// micro-batches per step before the optimizer newOpt makes for the model steps.
func Reference(bn bool, batch, steps, micro int, newOpt func(*nn.ParamSet) (optim.Optimizer, error)) (*nn.Model, error) {
	m, err := nn.NewModel(ConvNet(bn), nn.WithSeed(1))
	if err != nil {
		return nil, err
	}
	p, err := nn.Compile(m, Classify(batch))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	opt, err := newOpt(m.Params)
	if err != nil {
		return nil, err
	}
	for s := range steps {
		m.Params.ZeroGrad()
		for k := range micro {
			if err := Feed(p, s, k, 0, batch); err != nil {
				return nil, err
			}
			if err := p.Run(context.Background()); err != nil {
				return nil, fmt.Errorf("testnet: reference step %d: %w", s, err)
			}
		}
		if err := opt.Step(); err != nil {
			return nil, fmt.Errorf("testnet: reference step %d: %w", s, err)
		}
	}
	return m, nil
}

// MaxRel is the element-wise relative difference max|a-b| / max|b| (max|a-b| when b is zero).
func MaxRel(a, b []float32) float64 {
	var num, den float64
	for i := range b {
		num = math.Max(num, math.Abs(float64(a[i])-float64(b[i])))
		den = math.Max(den, math.Abs(float64(b[i])))
	}
	if den == 0 {
		return num
	}
	return num / den
}

// Rel is the norm-wise relative difference ||a-b|| / ||b|| (||a-b|| when b is zero).
func Rel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// EachRank runs fn for ranks 0..n-1 concurrently (in-process ranks of one group) and
// returns the first error, naming its rank. A hang fails after timeout instead of blocking
// the test.
func EachRank(n int, timeout time.Duration, fn func(r int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		return fmt.Errorf("ranks did not finish within %v (hang)", timeout)
	}
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}
