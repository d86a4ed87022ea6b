package train_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// withFrozen is gormlp's perceptron whose inputs first go through a frozen [In,In] matrix
// initialised by init (gorgonia's G.GlorotU reads the clock). declare says how the build
// function declares it: "constant" (b.Constant), "none" (a mistake), or "learnable".
func withFrozen(n int, init G.InitWFn, declare string) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", n, gormlp.In)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("y", n, gormlp.Out)
		if err != nil {
			return nil, err
		}
		f := G.NewMatrix(b.Graph, tensor.Float32, G.WithShape(gormlp.In, gormlp.In), G.WithName("frozen"), G.WithInit(init))
		switch declare {
		case "constant":
			if f, err = b.Constant(f); err != nil {
				return nil, err
			}
		case "learnable":
			if f, err = b.Learnable(f); err != nil {
				return nil, err
			}
		}
		w1, w2 := gormlp.Learnables(b.Graph, 1)
		u1, err := b.Learnable(w1)
		if err != nil {
			return nil, err
		}
		u2, err := b.Learnable(w2)
		if err != nil {
			return nil, err
		}
		return gormlp.Forward(G.Must(G.Mul(x, f)), y, u1, u2)
	}
}

// TestRefusalsNameTheFix: each mistake a user of a plain gorgonia build function makes is an
// error at NewGraphModel, Compile, New or SetInput that names the node, input or option and
// the fix; none trains silently. The messages are quoted.
func TestRefusalsNameTheFix(t *testing.T) {
	ctx := context.Background()
	one := comm.NewLocalGroups(1)[0]
	defer one.Close(ctx)
	other := G.NewGraph()
	stray := G.NewMatrix(other, tensor.Float32, G.WithShape(gormlp.In, gormlp.Hidden), G.WithName("w1"), G.WithInit(G.GlorotU(1)))
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"undeclared weight", func() error {
			_, err := nn.NewGraphModel(withFrozen(4, G.GlorotU(1), "none"))
			return err
		}, "node frozen (4, 4) holds a value but is neither an input nor a learnable: pass it to b.Learnable, or b.Constant if it is meant to be frozen"},
		{"G.Grad in the build function", func() error {
			_, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) {
				loss, err := gormlp.Fixed(1, 4)(b)
				if err != nil {
					return nil, err
				}
				_, err = G.Grad(loss, b.Graph.AllNodes()[2], b.Graph.AllNodes()[3])
				return loss, err
			})
			return err
		}, "Compile differentiates the loss itself"},
		{"learnable of another graph", func() error {
			_, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) {
				_, err := b.Learnable(stray)
				return nil, err
			})
			return err
		}, "learnable w1 belongs to another graph than b.Graph: create it inside the build function, on b.Graph"},
		{"op on a node of another graph", func() error {
			_, err := nn.NewGraphModel(func(b *nn.Builder) (*G.Node, error) {
				x, err := b.Input("x", 4, gormlp.In)
				if err != nil {
					return nil, err
				}
				return G.Mul(x, stray)
			})
			return err
		}, "a node of another graph reached the build function: create every node on b.Graph"},
		{"DataParallel given a replica's share", func() error {
			m, err := nn.NewGraphModel(gormlp.Fixed(1, 4))
			if err != nil {
				return err
			}
			d, err := dp.New(m, func(b *nn.Builder, n int) (*G.Node, error) { return gormlp.Build(1)(b, n) }, dp.WithReplicas(2))
			if err != nil {
				return err
			}
			defer d.Close()
			p, err := d.Program(8)
			if err != nil {
				return err
			}
			return p.SetInput("x", make([]float32, 4*gormlp.In))
		}, `dp: input "x" takes the global batch of 8 samples of 4 values (32 values), got 16: that is a replica's share (4 samples); SetInput takes the whole global batch`},
		{"ZeRO-3 without an optimizer", func() error {
			m, err := nn.NewGraphModel(gormlp.Fixed(1, 4))
			if err != nil {
				return err
			}
			_, err = zero.New(ctx, m, one)
			return err
		}, "zero: rank 0: no optimizer: give WithOptimizer, for example zero.WithOptimizer(zero.AdamW(1e-3))"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant one containing %q", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
}

// TestConstantIsReplicated: a frozen weight declared with b.Constant and initialised from
// the clock (different on each of two real processes) is rank 0's on both ranks after
// ddp.New, the same in every graph compiled from the model, and part of the agreement
// check: rank 1 changing it before its third step is caught at the check every 4 steps
// (before the fourth, after 3 completed) on both ranks, naming it, though buffers are not
// broadcast.
func TestConstantIsReplicated(t *testing.T) {
	job := proctest.Spawn(t, world, "GP_TRAIN_TEST_WORKER", "constant", nil)
	var sums [world]string
	for r, err := range job.Errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, job.Outputs[r])
		}
		out := job.Outputs[r]
		i := strings.Index(out, "frozen sum ")
		if i < 0 {
			t.Fatalf("rank %d said:\n%s", r, out)
		}
		sums[r] = strings.Fields(out[i:])[2]
		want := fmt.Sprintf("ddp: rank %d: replicas diverged after step 3: buffer frozen differs between rank 0 and rank 1", r)
		if !strings.Contains(out, want) {
			t.Errorf("rank %d said:\n%s\nwant %q", r, out, want)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("the frozen weight differs across ranks after ddp.New: %s and %s", sums[0], sums[1])
	}
}

// constantWorker is the "constant" scenario of TestConstantIsReplicated.
func constantWorker(ctx context.Context, g comm.Group) error {
	r := g.Rank()
	build := withFrozen(per, G.GlorotU(1), "constant")
	m, err := nn.NewGraphModel(build)
	if err != nil {
		return err
	}
	d, err := ddp.New(ctx, m, g, ddp.CheckEvery(4), ddp.BroadcastBuffers(false))
	if err != nil {
		return err
	}
	p, err := d.Compile(build, nn.WithSolver(G.NewVanillaSolver(G.WithLearnRate(0.05))))
	if err != nil {
		return err
	}
	frozen := m.Params.Buffer("frozen").Data
	var sum float64
	for _, v := range frozen {
		sum += float64(v)
	}
	fmt.Printf("frozen sum %.9g\n", sum)
	return untilDiverged(ctx, p, r, 8, func(step int) {
		if step == 2 && r == 1 {
			frozen[0] += 1e-3
		}
	})
}

// untilDiverged trains p (rank r's share of gormlp's data) for at most steps steps, calling
// perturb before each, until a step fails with ddp.ErrDiverged, which it prints; it is an
// error when none does.
func untilDiverged(ctx context.Context, p train.Program, r, steps int, perturb func(step int)) error {
	x, y := make([]float32, per*gormlp.In), make([]float32, per)
	for step := range steps {
		perturb(step)
		gormlp.Data(x, y, step*global+r*per, per)
		if err := feed(p, x, y); err != nil {
			return err
		}
		if err := train.RunStep(ctx, p); err != nil {
			if errors.Is(err, ddp.ErrDiverged) {
				fmt.Println("diverged:", err)
				return nil
			}
			return err
		}
	}
	return errors.New("no divergence reported")
}
