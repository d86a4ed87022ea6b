package zero

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/region"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/train"
)

// The network, graph and comparison shared with DDP's tests; with BatchNorm the ranks use
// SyncBatchNorm, so that every configuration sees the global batch.
var (
	convNet  = testnet.ConvNet
	classify = testnet.Classify
	rel      = testnet.Rel
)

const (
	side     = testnet.Side // input images are 3×side×side
	classes  = testnet.Classes
	lr       = 1e-2
	wd       = 1e-2
	equivTol = 1e-5
)

// feed sets the network's inputs to samples [lo, hi) of step.
func feed(p testnet.Inputs, step, lo, hi int) error { return testnet.Feed(p, step, 0, lo, hi) }

func adamW(ps *nn.ParamSet) (optim.Optimizer, error) {
	segs, err := optim.Segments(ps, wd)
	if err != nil {
		return nil, err
	}
	return optim.NewAdamW(segs, lr)
}

// reference trains one process on the global batch (world·per samples) with optim's AdamW.
func reference(bn bool, world, per, steps int) (*nn.Model, error) {
	return testnet.Reference(bn, world*per, steps, 1, adamW)
}

// each runs fn for every rank concurrently, failing on a hang.
func each(n int, fn func(r int) error) error { return testnet.EachRank(n, 90*time.Second, fn) }

// trainDDP runs DDP with optim's AdamW on world in-process ranks and returns rank 0's model.
func trainDDP(bn bool, world, per, steps int) (*nn.Model, error) {
	groups := comm.NewLocalGroups(world)
	defer closeAll(groups)
	models := make([]*nn.Model, world)
	err := each(world, func(r int) error {
		ctx := context.Background()
		m, err := nn.NewModel(convNet(bn), nn.WithSeed(int64(1+100*r)))
		if err != nil {
			return err
		}
		var opts []ddp.Option
		if bn {
			opts = append(opts, ddp.SyncBatchNorm())
		}
		d, err := ddp.New(ctx, m, groups[r], opts...)
		if err != nil {
			return err
		}
		opt, err := adamW(m.Params)
		if err != nil {
			return err
		}
		p, err := d.Compile(classify(per), nn.WithOptimizer(opt))
		if err != nil {
			return err
		}
		for s := range steps {
			m.Params.ZeroGrad()
			if err := feed(p, s, r*per, (r+1)*per); err != nil {
				return err
			}
			if err := p.RunStep(ctx); err != nil {
				return err
			}
		}
		models[r] = m
		return nil
	})
	return models[0], err
}

// zeroRun is the result of training with ZeRO on in-process ranks.
type zeroRun struct {
	params  [][]float32 // per rank: gathered parameters, ParamSet layout
	models  []*nn.Model // per rank (buffers)
	engines []*Engine
	progs   []*Program
}

// trainZero trains world in-process ZeRO ranks for steps steps and gathers the parameters.
func trainZero(bn bool, world, per, steps int, opts ...Option) (*zeroRun, error) {
	groups := comm.NewLocalGroups(world)
	defer closeAll(groups)
	res := &zeroRun{params: make([][]float32, world), models: make([]*nn.Model, world),
		engines: make([]*Engine, world), progs: make([]*Program, world)}
	err := each(world, func(r int) error {
		ctx := context.Background()
		m, err := nn.NewModel(convNet(bn), nn.WithSeed(int64(1+100*r)))
		if err != nil {
			return err
		}
		all := append([]Option{WithOptimizer(AdamW(lr)), WithWeightDecay(wd)}, opts...)
		if bn {
			all = append(all, SyncBatchNorm())
		}
		e, err := New(ctx, m, groups[r], all...)
		if err != nil {
			return err
		}
		p, err := e.Compile(classify(per))
		if err != nil {
			return err
		}
		for s := range steps {
			e.ZeroGrad()
			if err := feed(p, s, r*per, (r+1)*per); err != nil {
				return err
			}
			if err := train.RunStep(ctx, p); err != nil {
				return err
			}
		}
		if res.params[r], err = e.GatherParams(ctx); err != nil {
			return err
		}
		res.models[r], res.engines[r], res.progs[r] = m, e, p
		return nil
	})
	return res, err
}

func closeAll(groups []comm.Group) {
	for _, g := range groups {
		g.Close(context.Background())
	}
}

// rel is ‖a−b‖/‖b‖.

// compareParams checks every parameter of flat (ParamSet layout of want) and the float
// buffers of got against want.
func compareParams(flat []float32, got, want *nn.Model, tol float64) error {
	for _, p := range want.Params.Params {
		if r := rel(flat[p.Offset:p.Offset+p.Numel()], p.Data); !(r <= tol) {
			return fmt.Errorf("parameter %s: rel %.3g > %.1g", p.Name, r, tol)
		}
	}
	if got == nil {
		return nil
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

func adamWSegs(segs []optim.Segment) (optim.Optimizer, error) { return optim.NewAdamW(segs, lr) }

// needMmap skips a test where memory regions are not mappings (internal/region on windows):
// disk offload is refused there, and heap regions hold their memory between steps.
func needMmap(t *testing.T) {
	t.Helper()
	if !region.Mapped {
		t.Skip("memory regions are not mappings on " + runtime.GOOS)
	}
}
