package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	G "gorgonia.org/gorgonia"
)

const world, per, features, classes = 2, 4, 6, 3

func mlp() nn.Module {
	return &nn.Sequential{Names: []string{"fc1", "relu", "fc2"},
		Layers: []nn.Module{&nn.Linear{In: features, Out: 8}, &nn.ReLU{}, &nn.Linear{In: 8, Out: classes}}}
}

func build(b *nn.Builder) (*G.Node, error) {
	x, err := b.Input("x", per, features)
	if err != nil {
		return nil, err
	}
	y, err := b.Input("y", per)
	if err != nil {
		return nil, err
	}
	logits, err := b.Forward(x)
	if err != nil {
		return nil, err
	}
	return ops.CrossEntropy(logits, y, 0)
}

// train runs 3 DDP steps (SGD with momentum, sharded GradScaler) on groups and returns each
// rank's final parameters.
func train(groups []comm.Group) ([][]float32, error) {
	out := make([][]float32, len(groups))
	errs := make([]error, len(groups))
	var mu sync.Mutex // graph construction is serialised (docs/DESIGN.md §1)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				ctx := context.Background()
				m, err := nn.NewModel(mlp(), nn.WithSeed(int64(1+r))) // DDP's broadcast must align them
				if err != nil {
					return err
				}
				d, err := ddp.New(ctx, m, g)
				if err != nil {
					return err
				}
				mu.Lock()
				p, err := d.Compile(build)
				mu.Unlock()
				if err != nil {
					return err
				}
				segs, err := optim.Segments(m.Params, 0)
				if err != nil {
					return err
				}
				opt, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
				if err != nil {
					return err
				}
				sc, err := amp.NewShardedScaler(g, amp.WithInitScale(1), amp.WithGradBuffer(m.Params.Grad))
				if err != nil {
					return err
				}
				for step := range 3 {
					rng := rand.New(rand.NewSource(int64(10*step + r)))
					x, y := make([]float32, per*features), make([]float32, per)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					for i := range y {
						y[i] = float32(rng.Intn(classes))
					}
					if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
						return err
					}
					m.Params.ZeroGrad()
					if err := p.Run(ctx); err != nil {
						return err
					}
					if _, err := sc.StepContext(ctx, opt); err != nil {
						return err
					}
					if err := sc.UpdateContext(ctx); err != nil {
						return err
					}
				}
				out[r] = append([]float32(nil), m.Params.Data...)
				return nil
			}()
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// DDP and the sharded GradScaler run unchanged on NCCL groups (fake NCCL) and end where
// they end on comm's in-process groups, to float32 rounding of the reduction order.
func TestDDPAndShardedScalerOnNCCL(t *testing.T) {
	cudatest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", world)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	groups := make([]comm.Group, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := store.Dial(ctx, srv.Addr())
			if err != nil {
				errs[r] = err
				return
			}
			t.Cleanup(func() { st.Close() })
			groups[r], errs[r] = nccl.New(ctx, st, r, world)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			g.Close(context.Background())
		}
	}()
	got, err := train(groups)
	if err != nil {
		t.Fatal(err)
	}
	local := comm.NewLocalGroups(world)
	defer func() {
		for _, g := range local {
			g.Close(context.Background())
		}
	}()
	want, err := train(local)
	if err != nil {
		t.Fatal(err)
	}
	for r := range world {
		if fmt.Sprint(got[r]) != fmt.Sprint(got[0]) {
			t.Fatalf("rank %d diverged from rank 0 on NCCL", r)
		}
		for i := range want[r] {
			if d := math.Abs(float64(got[r][i] - want[r][i])); d > 1e-6*math.Max(1, math.Abs(float64(want[r][i]))) {
				t.Fatalf("rank %d param %d: NCCL %v, local %v", r, i, got[r][i], want[r][i])
			}
		}
	}
}
