package devddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devddp"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/train"
)

// The fake libcuda, cuBLAS, NCCL (ranks of one process meet in it) and the CPU emulator of
// kernels.cu: device results are computed.
func TestMain(m *testing.M) { os.Exit(cudatest.MainEmulated(m)) }

var _ train.Overlapped = (*ddp.Program)(nil)

// tol bounds the difference between device DDP over 2 ranks and one CPU process on the
// global batch, relative to each tensor's scale. The device's GEMMs and reductions sum in
// other orders than gorgonia's CPU kernels (a few ulps, ~1e-7 relative, as cuda/tape's
// TestMLPMatchesCPU measures), and the global batch's mean is two half-batch means averaged
// by the all-reduce instead of one sum; 4 steps of the perceptron keep that under 1e-6 (the
// measured values are logged), and a bucket reduced twice, not at all, or not divided by
// the world size is off by 1e-1.
const tol = 1e-5

const world, global, steps = 2, 8, 4

var optimizers = []struct {
	name string
	new  func([]optim.Segment) (optim.Optimizer, error)
}{
	{"sgd-momentum", func(s []optim.Segment) (optim.Optimizer, error) {
		return optim.NewSGD(s, 0.05, optim.WithMomentum(0.9))
	}},
	{"adamw", func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewAdamW(s, 0.01) }},
}

// The gorgonia perceptron trained 4 steps by device DDP on 2 in-process ranks (each its own
// cuda.Device, an NCCL group over the fake NCCL for the buckets, an in-process comm group
// for the host's collectives) equals one CPU process (nn.Compile, optim) on the global
// batch: every step's loss (the ranks' mean) and the parameters after, with SGD with
// momentum and with AdamW, both with weight decay. One bucket per parameter, so that a
// bucket reduces while the backward goes on; steps 0-1 are Run then Step, steps 2-3 RunStep
// (each bucket stepped after its reduction); the agreement check runs every 2 steps.
func TestTwoRanksMatchCPU(t *testing.T) {
	cudatest.Require(t)
	for _, o := range optimizers {
		t.Run(o.name, func(t *testing.T) {
			wantLoss, wantParams := cpuRun(t, o.new)
			gotLoss, gotParams, nb := deviceRun(t, o.new)
			if nb < 2 {
				t.Fatalf("%d buckets, want one per parameter", nb)
			}
			for r := 1; r < world; r++ {
				if fmt.Sprint(gotParams[r]) != fmt.Sprint(gotParams[0]) {
					t.Fatalf("rank %d's parameters differ from rank 0's", r)
				}
			}
			var worstLoss float64
			for s := range steps {
				mean := (gotLoss[0][s] + gotLoss[1][s]) / 2
				worstLoss = math.Max(worstLoss, math.Abs(float64(mean-wantLoss[s]))/math.Abs(float64(wantLoss[s])))
			}
			w := testnet.MaxRel(gotParams[0], wantParams)
			t.Logf("%d buckets, %d steps: losses within %.3g, parameters within %.3g of one CPU process (tolerance %g)", nb, steps, worstLoss, w, tol)
			if worstLoss > tol || w > tol {
				t.Fatalf("device DDP differs from the CPU: losses %.3g, parameters %.3g (tolerance %g)\ndevice %v\ncpu    %v", worstLoss, w, tol, gotParams[0], wantParams)
			}
		})
	}
}

func cpuRun(t *testing.T, newOpt func([]optim.Segment) (optim.Optimizer, error)) ([]float32, []float32) {
	ctx := context.Background()
	build := gormlp.Fixed(1, global)
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	opt := mustOpt(t, m, newOpt)
	p, err := nn.Compile(m, build, nn.WithOptimizer(opt))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, y := make([]float32, global*gormlp.In), make([]float32, global*gormlp.Out)
	var losses []float32
	for s := range steps {
		gormlp.Data(x, y, s*global, global)
		if err := errors.Join(p.SetInput("x", x), p.SetInput("y", y)); err != nil {
			t.Fatal(err)
		}
		if err := train.RunStep(ctx, p); err != nil {
			t.Fatal(err)
		}
		l, _ := p.LossValue()
		losses = append(losses, l)
	}
	return losses, append([]float32(nil), m.Params.Data...)
}

// deviceRun trains on world in-process ranks and returns each rank's losses and final
// parameters, and the number of buckets.
func deviceRun(t *testing.T, newOpt func([]optim.Segment) (optim.Optimizer, error)) ([][]float32, [][]float32, int) {
	losses, params := make([][]float32, world), make([][]float32, world)
	buckets := 0
	err := onRanks(t, newOpt, nil, []ddp.Option{ddp.CheckEvery(2)}, nil, func(ctx context.Context, r int, k *rank) error {
		if r == 0 {
			buckets = len(k.d.Buckets())
		}
		for s := range steps {
			k.feed(s)
			var err error
			if s < 2 {
				err = k.p.Run(ctx)
				if err == nil {
					err = k.p.Step(ctx)
				}
			} else {
				err = train.RunStep(ctx, k.p)
			}
			if err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
			l, err := k.p.LossValue()
			if err != nil {
				return err
			}
			losses[r] = append(losses[r], l)
		}
		if err := k.st.ToHost(ctx); err != nil {
			return err
		}
		params[r] = append([]float32(nil), k.m.Params.Data...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return losses, params, buckets
}

// leaveTimeout bounds each NCCL operation in the test of a rank that leaves: NCCL, as the
// fake, cannot tell a peer that destroyed its communicator from a slow one, so the group's
// timeout is what ends the wait.
const leaveTimeout = 2 * time.Second

// A replica whose device parameters drifted (rank 1's first weight changed on the device
// after step 1) fails the next step's agreement check on both ranks with ddp.ErrDiverged
// naming the tensor, and a rank that leaves (rank 1 closes its NCCL group instead of
// running step 2) makes rank 0's step fail with the group's timeout, not hang.
func TestDivergenceAndLeavingRankFail(t *testing.T) {
	cudatest.Require(t)
	sgd := optimizers[0].new
	m, err := nn.NewGraphModel(gormlp.Fixed(1, global/world))
	if err != nil {
		t.Fatal(err)
	}
	var drifted string // the parameter at the start of the flat buffer
	for _, p := range m.Params.Params {
		if p.Offset == 0 {
			drifted = p.Name
		}
	}
	errs := make([]error, world)
	_ = onRanks(t, sgd, nil, []ddp.Option{ddp.CheckEvery(1)}, nil, func(ctx context.Context, r int, k *rank) error {
		for s := range 2 {
			k.feed(s)
			if s == 1 && r == 1 {
				// The device is the master copy: bring the host's up to date first.
				if err := k.st.ToHost(ctx); err != nil {
					return err
				}
				k.m.Params.Data[0] += 1
				if err := k.st.FromHost(); err != nil {
					return err
				}
			}
			if err := train.RunStep(ctx, k.p); err != nil {
				errs[r] = err
				return nil
			}
		}
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, ddp.ErrDiverged) || !strings.Contains(err.Error(), "parameter "+drifted+" differs") || !strings.Contains(err.Error(), "1 of 2 tensors") {
			t.Fatalf("rank %d: %v, want ddp.ErrDiverged naming %s alone", r, err, drifted)
		}
		t.Logf("rank %d: %v", r, err)
	}

	start := time.Now()
	errs = make([]error, world)
	_ = onRanks(t, sgd, nil, []ddp.Option{ddp.CheckEvery(0)}, []nccl.Option{nccl.WithTimeout(leaveTimeout)}, func(ctx context.Context, r int, k *rank) error {
		for s := range 2 {
			k.feed(s)
			if s == 1 && r == 1 {
				return k.g.Close(ctx)
			}
			if err := train.RunStep(ctx, k.p); err != nil {
				errs[r] = err
				return nil
			}
		}
		return nil
	})
	took := time.Since(start)
	if errs[0] == nil {
		t.Fatal("rank 0's step succeeded after rank 1 left")
	}
	if !errors.Is(errs[0], comm.ErrTimeout) {
		t.Fatalf("rank 0: %v, want the NCCL group's timeout (comm.ErrTimeout)", errs[0])
	}
	t.Logf("rank 0, %v after the start: %v", took.Round(time.Millisecond), errs[0])
}

// baseOpts give one bucket per parameter, so that a bucket reduces while the backward goes
// on; a test's options come after them.
var baseOpts = []ddp.Option{ddp.FirstBucketBytes(4), ddp.BucketCapBytes(4), ddp.LastBucketBytes(0)}

// rank is one in-process rank's training setup.
type rank struct {
	g    *nccl.Group
	m    *nn.Model
	d    *ddp.DDP
	st   *tape.State
	p    *ddp.Program
	x, y []float32
	r    int
}

// feed sets step s's inputs: this rank's half of the global batch.
func (k *rank) feed(s int) {
	n := global / world
	gormlp.Data(k.x, k.y, s*global+k.r*n, n)
	_ = k.p.SetInput("x", k.x)
	_ = k.p.SetInput("y", k.y)
}

// onRanks sets up world in-process ranks (each its own cuda.Device and NCCL group over the
// fake NCCL for the buckets, an in-process comm group for the host's collectives, one
// bucket per parameter unless dopts say otherwise, net's model, by default the gorgonia
// MLP on half the global batch) and runs fn on each. A
// rank that fails cancels the others' context. Everything is closed on return.
func onRanks(t *testing.T, newOpt func([]optim.Segment) (optim.Optimizer, error), net *netSpec, dopts []ddp.Option, nopts []nccl.Option, fn func(ctx context.Context, r int, k *rank) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := store.Listen("127.0.0.1:0", world)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	host := comm.NewLocalGroups(world)
	defer func() {
		for _, g := range host {
			g.Close(context.Background())
		}
	}()
	devs := make([]*cuda.Device, world)
	for r := range devs {
		if devs[r], err = cuda.Open(0); err != nil {
			t.Fatal(err)
		}
		defer devs[r].Close()
	}
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				store, err := store.Dial(ctx, srv.Addr())
				if err != nil {
					return err
				}
				defer store.Close()
				k := &rank{r: r}
				if k.g, err = nccl.New(ctx, store, r, world, append([]nccl.Option{nccl.WithDevice(0)}, nopts...)...); err != nil {
					return err
				}
				defer k.g.Close(context.Background())
				build := gormlp.Fixed(1, global/world)
				if net != nil {
					build = net.build
					k.m, err = net.model()
				} else {
					k.m, err = nn.NewGraphModel(build)
				}
				if err != nil {
					return err
				}
				be := devddp.NewBackend(devs[r], k.g)
				defer be.Close()
				all := append(append(append([]ddp.Option{}, baseOpts...), dopts...), ddp.WithBackend(be))
				if k.d, err = ddp.New(ctx, k.m, host[r], all...); err != nil {
					return err
				}
				k.st = be.State()
				if k.p, err = k.d.Compile(build, nn.WithOptimizer(mustOpt(t, k.m, newOpt))); err != nil {
					return err
				}
				defer k.p.Close()
				n := global / world
				k.x, k.y = make([]float32, n*gormlp.In), make([]float32, n*gormlp.Out)
				return fn(ctx, r, k)
			}()
			if errs[r] != nil {
				cancel() // the other rank must not wait for this one
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func mustOpt(t *testing.T, m *nn.Model, f func([]optim.Segment) (optim.Optimizer, error)) optim.Optimizer {
	segs, err := optim.Segments(m.Params, 0.01)
	if err != nil {
		t.Error(err)
		return nil
	}
	o, err := f(segs)
	if err != nil {
		t.Error(err)
	}
	return o
}
