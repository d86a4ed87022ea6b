package devdp_test

import (
	"context"
	"errors"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"math"
	"os"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devdp"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/train"
)

// The fake libcuda and cuBLAS and the CPU emulator of kernels.cu: device results are
// computed. The fake driver has two devices (GP_FAKE_DEVICES; tests that need another count
// set it themselves), as the Example's dp.GPUs(0, 1) needs; two cuda.Devices on one ordinal
// are two devices with their own streams and memory too.
func TestMain(m *testing.M) {
	os.Setenv("GP_FAKE_DEVICES", "2")
	os.Exit(cudatest.MainEmulated(m))
}

var _ dp.Backend = (*devdp.Backend)(nil)

// tol: as cuda/devddp's. The device's GEMMs sum in other orders than the CPU's (~1e-7
// relative), and the global mean is two weighted chunk means; a chunk weighted 1/2 instead
// of 4/7 or 3/7, or a replica's gradients dropped, is off by 1e-2 and more.
const tol = 1e-5

// DataParallel over 2 devices trains the gorgonia perceptron 4 steps with the losses and
// parameters of one CPU process on the global batch, with uneven chunks (7 samples: 4 and
// 3), with SGD with momentum and with AdamW.
func TestTwoDevicesMatchCPU(t *testing.T) {
	cudatest.Require(t)
	const n, steps = 7, 4
	opts := map[string]func([]optim.Segment) (optim.Optimizer, error){
		"sgd-momentum": func(s []optim.Segment) (optim.Optimizer, error) {
			return optim.NewSGD(s, 0.05, optim.WithMomentum(0.9))
		},
		"adamw": func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewAdamW(s, 0.01) },
	}
	devs := make([]*cuda.Device, 2)
	for i := range devs {
		d, err := cuda.Open(0)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	for name, newOpt := range opts {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			build := gormlp.Fixed(1, n)
			mc, md := model(t, build), model(t, build)
			cpu, err := nn.Compile(mc, build, nn.WithOptimizer(opt(t, mc, newOpt)))
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			be := devdp.NewBackend(devs...)
			rep, err := dp.New(md, gormlp.Build(1), dp.WithBackend(be), dp.WithBuildOptions(nn.WithOptimizer(opt(t, md, newOpt))))
			if err != nil {
				t.Fatal(err)
			}
			defer rep.Close()
			p, err := rep.Program(n)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			x, y := make([]float32, n*gormlp.In), make([]float32, n*gormlp.Out)
			var worstLoss float64
			for s := range steps {
				gormlp.Data(x, y, s*n, n)
				for _, q := range []train.Program{cpu, p} {
					if err := errors.Join(q.SetInput("x", x), q.SetInput("y", y)); err != nil {
						t.Fatal(err)
					}
					if err := train.RunStep(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
				lc, _ := cpu.LossValue()
				ld, err := p.LossValue()
				if err != nil {
					t.Fatal(err)
				}
				worstLoss = math.Max(worstLoss, math.Abs(float64(ld-lc))/math.Abs(float64(lc)))
			}
			if err := be.Master().ToHost(ctx); err != nil {
				t.Fatal(err)
			}
			w := maxRel(md.Params.Data, mc.Params.Data)
			t.Logf("chunks 4+3, %d steps: losses within %.3g, parameters within %.3g of one CPU process (tolerance %g)", steps, worstLoss, w, tol)
			if worstLoss > tol || w > tol {
				t.Fatalf("DataParallel on devices differs from the CPU: losses %.3g, parameters %.3g (tolerance %g)", worstLoss, w, tol)
			}
		})
	}
}

func model(t *testing.T, build nn.BuildFunc) *nn.Model {
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func opt(t *testing.T, m *nn.Model, f func([]optim.Segment) (optim.Optimizer, error)) optim.Optimizer {
	segs, err := optim.Segments(m.Params, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	o, err := f(segs)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// maxRel is max|a-b| / max|b|, the comparison every strategy's tests share.
var maxRel = testnet.MaxRel
