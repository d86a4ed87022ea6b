package devdp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/devdp"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	G "gorgonia.org/gorgonia"
)

// dpRun is one DataParallel's outcome over the steps of a hostCase.
type dpRun struct {
	losses, outputs []float32 // every Run's, in order
	chunks          [][]int   // every Run's Result.Chunks
	params          []float32 // after the last Step
}

// hostCase is a DataParallel configuration run on the host (2 CPU replicas) and on the
// emulated devices (2 devices).
type hostCase struct {
	name  string
	n     int  // global batch
	sum   bool // WithSumLoss
	accum int  // Runs per Step (gradient accumulation)
	adamw bool // AdamW instead of SGD with momentum
}

// DataParallel on the device backend equals DataParallel on the host backend on the same
// model (testnet's ConvNet without BatchNorm, the strategies' shared reference) and batches
// (testnet.Batch), for what package dp does whatever the backend: uneven chunks (4+3), a
// batch smaller than the device count (one replica runs), WithSumLoss's weights, gradient
// accumulation over Runs, WithGather's logits in batch order, and both optimizers. Losses,
// gathered logits and parameters within tol (TestTwoDevicesMatchCPU's: the device's GEMMs sum
// in other orders, ~1e-7; a chunk weighted 1 instead of n_i/N, or a replica's gradients
// dropped, is off by 1e-2 and more). The parameters must have moved by more than 1e2·tol, so
// equality is not that of two untrained models.
func TestDeviceMatchesHostDataParallel(t *testing.T) {
	devs := twoDevices(t)
	const steps = 3
	for _, c := range []hostCase{
		{name: "uneven 4+3", n: 7},
		{name: "uneven 3+2 adamw", n: 5, adamw: true},
		{name: "one sample one replica", n: 1},
		{name: "sum loss", n: 6, sum: true},
		{name: "accumulate 2 runs", n: 4, accum: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(backend []dp.Option) dpRun {
				m := convNet(t)
				o := opt(t, m, func(s []optim.Segment) (optim.Optimizer, error) {
					if c.adamw {
						return optim.NewAdamW(s, 0.01)
					}
					return optim.NewSGD(s, 0.05, optim.WithMomentum(0.9))
				})
				opts := append([]dp.Option{dp.WithGather("logits"), dp.WithBuildOptions(nn.WithOptimizer(o))}, backend...)
				if c.sum {
					opts = append(opts, dp.WithSumLoss())
				}
				d, err := dp.New(m, classify, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				ctx := context.Background()
				var r dpRun
				for s := range steps {
					for micro := range max(c.accum, 1) {
						x, y := testnet.Batch(s, micro, 0, c.n)
						res, err := d.Run(ctx, dp.Batch{N: c.n, Inputs: map[string][]float32{"images": x, "labels": y}})
						if err != nil {
							t.Fatal(err)
						}
						r.losses = append(r.losses, res.Loss)
						r.outputs = append(r.outputs, res.Outputs["logits"]...)
						r.chunks = append(r.chunks, res.Chunks)
					}
					if err := d.Step(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if be, ok := d.Backend().(*devdp.Backend); ok {
					if err := be.Master().ToHost(ctx); err != nil {
						t.Fatal(err)
					}
				}
				r.params = slices.Clone(m.Params.Data)
				return r
			}
			host := run([]dp.Option{dp.WithReplicas(2)})
			dev := run([]dp.Option{dp.WithBackend(devdp.NewBackend(devs...))})
			if fmt.Sprint(dev.chunks) != fmt.Sprint(host.chunks) {
				t.Fatalf("chunks %v on the devices, %v on the host", dev.chunks, host.chunks)
			}
			init := convNet(t).Params.Data
			lw, ow, pw, moved := maxRel(dev.losses, host.losses), maxRel(dev.outputs, host.outputs), maxRel(dev.params, host.params), maxRel(host.params, init)
			t.Logf("chunks %v, %d Runs: losses within %.2g, gathered outputs within %.2g, parameters within %.2g of the host's (tolerance %g); parameters moved %.2g from their initial values",
				host.chunks[0], len(host.losses), lw, ow, pw, tol, moved)
			if lw > tol || ow > tol || pw > tol {
				t.Fatalf("device DataParallel differs from the host's: losses %.2g, outputs %.2g, parameters %.2g (tolerance %g)", lw, ow, pw, tol)
			}
			if moved < 1e2*tol {
				t.Fatalf("the parameters moved only %.2g: the comparison cannot tell training from none", moved)
			}
		})
	}
}

// convNet is testnet's ConvNet without BatchNorm, seed 1.
func convNet(t *testing.T) *nn.Model {
	m, err := nn.NewModel(testnet.ConvNet(false), nn.WithSeed(1))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// classify is testnet's graph for a chunk of n samples ("images", "labels"; "logits" named).
func classify(b *nn.Builder, n int) (*G.Node, error) { return testnet.Classify(n)(b) }

// updater is an optimizer that is not one of optim's, which the device cannot run.
type updater struct{}

func (updater) Step() error { return nil }

// The device backend refuses at dp.New, naming the option and the backend, what it cannot
// honour, and a backend serves one DataParallel.
func TestDeviceRefusesWhatItCannotHonour(t *testing.T) {
	devs := twoDevices(t)
	m := model(t, gormlp.Fixed(1, 4))
	sgd := opt(t, m, func(s []optim.Segment) (optim.Optimizer, error) { return optim.NewSGD(s, 0.05) })
	for _, c := range []struct {
		name string
		opts []dp.Option
		want []string
	}{
		{"reduce workers", []dp.Option{dp.WithReduceWorkers(4)}, []string{"dp.WithReduceWorkers(4)", "cuda/devdp"}},
		{"gorgonia solver", []dp.Option{dp.WithBuildOptions(nn.WithSolver(G.NewVanillaSolver()))}, []string{"nn.WithSolver", "cuda/devdp"}},
		{"host-only optimizer", []dp.Option{dp.WithBuildOptions(nn.WithOptimizer(updater{}))}, []string{"nn.WithOptimizer(devdp_test.updater)", "cuda/devdp"}},
		{"cpu devices", []dp.Option{dp.WithDevices(dp.CPUs(2)...), dp.WithBuildOptions(nn.WithOptimizer(sgd))}, []string{"WithDevices", "devdp.Backend", "[cuda:0 cuda:1]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]dp.Option{dp.WithBackend(devdp.NewBackend(devs...))}, c.opts...)
			d, err := dp.New(m, gormlp.Build(1), opts...)
			if err == nil {
				d.Close()
				t.Fatal("dp.New: no error")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	be := devdp.NewBackend(devs...)
	d, err := dp.New(m, gormlp.Build(1), dp.WithBackend(be), dp.WithBuildOptions(nn.WithOptimizer(sgd)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := dp.New(m, gormlp.Build(1), dp.WithBackend(be)); err == nil || !strings.Contains(err.Error(), "already given") {
		t.Fatalf("a second dp.New on the same backend: %v, want a refusal", err)
	}
	if err := d.Step(context.Background()); err == nil || !strings.Contains(err.Error(), "Step before a training Run") {
		t.Fatalf("Step before a Run: %v", err)
	}
}
