package ddp

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

const (
	side    = testnet.Side // input images are 3×side×side
	classes = testnet.Classes
)

// The network, graph and comparison shared with the other strategies' tests.
var (
	convNet  = testnet.ConvNet
	classify = testnet.Classify
	rel      = testnet.Rel
)

// feed sets the network's inputs to samples [lo, hi) of micro-batch micro of step.
var feed = testnet.Feed

func newOpt(m *nn.Model) (optim.Optimizer, error) { return sgd(m.Params) }

func sgd(ps *nn.ParamSet) (optim.Optimizer, error) {
	segs, err := optim.Segments(ps, 1e-4)
	if err != nil {
		return nil, err
	}
	return optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
}

// reference trains one process on the concatenated global batch (world·per samples per
// micro-batch, micro micro-batches accumulated per step).
func reference(bn bool, world, per, steps, micro int) (*nn.Model, error) {
	return testnet.Reference(bn, world*per, steps, micro, sgd)
}

// compareModels checks every parameter and float buffer of got against want.
func compareModels(got, want *nn.Model, tol float64) error {
	for _, p := range want.Params.Params {
		if r := rel(got.Params.Param(p.Name).Data, p.Data); !(r <= tol) {
			return fmt.Errorf("parameter %s: rel %.3g > %.1g", p.Name, r, tol)
		}
	}
	for _, b := range want.Params.Buffers {
		gb := got.Params.Buffer(b.Name)
		if b.Data != nil {
			if r := rel(gb.Data, b.Data); !(r <= tol) {
				return fmt.Errorf("buffer %s: rel %.3g > %.1g", b.Name, r, tol)
			}
		} else if gb.Int64[0] != b.Int64[0] {
			return fmt.Errorf("buffer %s: %d, want %d", b.Name, gb.Int64[0], b.Int64[0])
		}
	}
	return nil
}

// sameBits reports whether two models' parameters and buffers are bit-identical.
func sameBits(a, b *nn.Model) error {
	for i, v := range a.Params.Data {
		if math.Float32bits(v) != math.Float32bits(b.Params.Data[i]) {
			return fmt.Errorf("parameter element %d differs: %g vs %g", i, v, b.Params.Data[i])
		}
	}
	for i, buf := range a.Params.Buffers {
		for j, v := range buf.Data {
			if v != b.Params.Buffers[i].Data[j] {
				return fmt.Errorf("buffer %s differs", buf.Name)
			}
		}
	}
	return nil
}

// cluster is n in-process ranks, each with a model (seeded differently, so that New's
// broadcast matters), a DDP and a program.
type cluster struct {
	groups []comm.Group
	models []*nn.Model
	ddps   []*DDP
	progs  []*Program
	opts   []optim.Optimizer
}

// newCluster creates the ranks: New concurrently (it communicates), Compile serially.
func newCluster(t testing.TB, groups []comm.Group, bn bool, per int, opts ...Option) *cluster {
	t.Helper()
	n := len(groups)
	c := &cluster{groups: groups, models: make([]*nn.Model, n), ddps: make([]*DDP, n),
		progs: make([]*Program, n), opts: make([]optim.Optimizer, n)}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close(context.Background())
		}
	})
	for r := range n {
		m, err := nn.NewModel(convNet(bn), nn.WithSeed(int64(1+100*r)))
		if err != nil {
			t.Fatal(err)
		}
		c.models[r] = m
	}
	if err := c.each(func(r int) error {
		var err error
		c.ddps[r], err = New(context.Background(), c.models[r], groups[r], opts...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for r := range n {
		var err error
		if c.opts[r], err = newOpt(c.models[r]); err != nil {
			t.Fatal(err)
		}
		if c.progs[r], err = c.ddps[r].Compile(classify(per), nn.WithOptimizer(c.opts[r])); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// each runs fn for every rank concurrently and returns the first error, failing on a hang.
func (c *cluster) each(fn func(r int) error) error {
	return testnet.EachRank(len(c.groups), 60*time.Second, fn)
}

// train runs steps synchronised steps of micro micro-batches (the first micro-1 under
// NoSync) on every rank, each rank on its slice of the global batch.
func (c *cluster) train(steps, per, micro int) error {
	n := len(c.groups)
	return c.each(func(r int) error {
		ctx := context.Background()
		m, p, d := c.models[r], c.progs[r], c.ddps[r]
		for s := range steps {
			m.Params.ZeroGrad()
			for k := range micro - 1 {
				if err := feed(p, s, k, r*per, (r+1)*per); err != nil {
					return err
				}
				if err := d.NoSync(func() error { return p.Run(ctx) }); err != nil {
					return err
				}
			}
			if err := feed(p, s, micro-1, r*per, (r+1)*per); err != nil {
				return err
			}
			if err := p.RunStep(ctx); err != nil {
				return err
			}
		}
		_ = n
		return nil
	})
}
