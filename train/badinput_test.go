package train_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// onRanks runs fn on two in-process ranks and returns their errors; graph construction is
// serialised (gorgonia's is not thread-safe).
func onRanks(fn func(r int, g comm.Group, build func(func())) error) []error {
	groups := comm.NewLocalGroups(world)
	var mu sync.Mutex
	build := func(f func()) { mu.Lock(); defer mu.Unlock(); f() }
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, groups[r], build)
			groups[r].Close(context.Background())
		}()
	}
	wg.Wait()
	return errs
}

// withExtra is gormlp's perceptron with a third learnable "w3" of the given shape that the
// loss uses (used) or not.
func withExtra(shape []int, used bool) nn.BuildFunc {
	mlp := gormlp.Fixed(1, per)
	return func(b *nn.Builder) (*G.Node, error) {
		loss, err := mlp(b)
		if err != nil {
			return nil, err
		}
		w3 := G.NewTensor(b.Graph, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName("w3"), G.WithInit(G.Ones()))
		u3, err := b.Learnable(w3)
		if err != nil || !used {
			return loss, err
		}
		return G.Add(loss, G.Must(G.Sum(u3)))
	}
}

func TestBadInputNamesNodeShapeAndRank(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// run is one rank's job; it returns the error the test checks.
		run  func(r int, g comm.Group, build func(func())) error
		want []string // substrings of every rank's error
	}{
		{"learnable shapes differ across ranks", func(r int, g comm.Group, build func(func())) error {
			shape := []int{2, 3}
			if r == 1 {
				shape = []int{3, 2}
			}
			var m *nn.Model
			var err error
			build(func() { m, err = nn.NewGraphModel(withExtra(shape, true)) })
			if err != nil {
				return err
			}
			_, err = ddp.New(ctx, m, g)
			return err
		}, []string{"rank 1: parameter w3 is [3 2] float32, rank 0: [2 3] float32"}},
		{"learnable with no gradient", func(r int, g comm.Group, build func(func())) error {
			var m *nn.Model
			var err error
			build(func() { m, err = nn.NewGraphModel(withExtra([]int{2}, false)) })
			if err != nil {
				return err
			}
			d, err := ddp.New(ctx, m, g)
			if err != nil {
				return err
			}
			var p *ddp.Program
			build(func() { p, err = d.Compile(withExtra([]int{2}, false)) })
			if err != nil {
				return err
			}
			x, y := make([]float32, per*gormlp.In), make([]float32, per)
			if err := feed(p, x, y); err != nil {
				return err
			}
			err = p.Run(ctx)
			if !errors.Is(err, ddp.ErrUnusedParameters) {
				return errors.Join(errors.New("want ErrUnusedParameters"), err)
			}
			return err
		}, []string{"w3"}},
		{"batch of the wrong shape", func(r int, g comm.Group, build func(func())) error {
			var m *nn.Model
			var err error
			build(func() { m, err = nn.NewGraphModel(gormlp.Fixed(1, per)) })
			if err != nil {
				return err
			}
			d, err := ddp.New(ctx, m, g)
			if err != nil {
				return err
			}
			var p *ddp.Program
			build(func() { p, err = d.Compile(gormlp.Fixed(1, per)) })
			if err != nil {
				return err
			}
			return p.SetInput("x", make([]float32, (per+1)*gormlp.In))
		}, []string{`input "x" holds 32 values (shape (8, 4)), got 36`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := onRanks(tc.run)
			for r, err := range errs {
				if err == nil {
					t.Fatalf("rank %d: no error", r)
				}
				for _, w := range append(tc.want, "rank "+string(rune('0'+r))) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("rank %d: %v\nwant it to contain %q", r, err, w)
					}
				}
			}
		})
	}
}

// Under ZeRO-3 a learning rate changed on one rank only (a scheduler stepped there alone)
// fails the next periodic check on every rank.
func TestZeRO3LearningRateDisagreementIsNamed(t *testing.T) {
	ctx := context.Background()
	errs := onRanks(func(r int, g comm.Group, build func(func())) error {
		var m *nn.Model
		var err error
		build(func() { m, err = nn.NewGraphModel(gormlp.Fixed(1, per)) })
		if err != nil {
			return err
		}
		e, err := zero.New(ctx, m, g, zero.WithOptimizer(zero.AdamW(adamLR)), zero.CheckEvery(3))
		if err != nil {
			return err
		}
		defer e.Close()
		var p *zero.Program
		build(func() { p, err = e.Compile(gormlp.Fixed(1, per)) })
		if err != nil {
			return err
		}
		x, y := make([]float32, per*gormlp.In), make([]float32, per)
		for step := range 10 {
			if step == 4 && r == 1 {
				e.Optimizer().SetLR(adamLR / 2)
			}
			gormlp.Data(x, y, step*global+r*per, per)
			if err := feed(p, x, y); err != nil {
				return err
			}
			if err := train.RunStep(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		want := "zero: rank " + string(rune('0'+r)) + ": replicas diverged after step 5: optimizer step count and learning rate differs between rank 0 and rank 1"
		if err == nil || !errors.Is(err, zero.ErrDiverged) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v\nwant %q", r, err, want)
		}
	}
}
