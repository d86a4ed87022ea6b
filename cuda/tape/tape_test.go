package tape_test

import (
	"context"
	"github.com/gorgonia-parallel/gp/internal/testnet"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/internal/gormlp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// The fake libcuda, cuBLAS and the CPU emulator of kernels.cu: device results are computed.
// TestNoDeviceFailsAtOnce's child process runs without them, and so does the GPU check
// (REQUIRE_GPU=1, set by cuda/gpucheck's run.sh, which runs this test binary too): there the
// real libraries are used and a device that does not open fails every test instead of
// skipping it. TestStepSyncs' child runs on the libraries its parent built.
func TestMain(m *testing.M) {
	if os.Getenv(noDeviceVar) == "1" || os.Getenv(countVar) != "" || realGPU {
		os.Exit(m.Run())
	}
	os.Exit(cudatest.MainEmulated(m))
}

var realGPU = os.Getenv("REQUIRE_GPU") == "1"

var _ train.Program = (*tape.Program)(nil)

var shared *cuda.Device

func device(t *testing.T) *cuda.Device {
	t.Helper()
	if !realGPU {
		cudatest.Require(t)
	}
	if shared == nil {
		d, err := cuda.Open(0)
		if err != nil {
			t.Fatal(err)
		}
		shared = d
		if realGPU {
			t.Logf("device 0: %s (real libraries, REQUIRE_GPU=1)", d.Name())
		}
	}
	return shared
}

// maxRel is max|a-b| / max|b|, the comparison every strategy's tests share.
var maxRel = testnet.MaxRel

// mlpTol bounds the difference from the CPU after the steps below. The device sums in other
// orders than gorgonia's CPU kernels (cuBLAS's GEMM, the reductions), each float32 sum then
// differing by a few ulps (~1e-7 relative); over 5 steps of a 4-16-1 network that stays
// within 1e-5, and a wrong gradient is off by far more than that.
const mlpTol = 1e-5

// The plain gorgonia MLP trained 5 steps on the device equals nn.Compile's CPU run: the
// losses of every step and the weights after, with gorgonia's solvers and with optim's SGD.
func TestMLPMatchesCPU(t *testing.T) {
	d := device(t)
	const batch, steps = 8, 5
	updates := []struct {
		name string
		opt  func(m *nn.Model) (nn.BuildOption, error)
	}{
		{"vanilla", solver(0)},
		{"adam", solver(2)},
		{"optim.SGD", func(m *nn.Model) (nn.BuildOption, error) {
			segs, err := optim.Segments(m.Params, 0)
			if err != nil {
				return nil, err
			}
			sgd, err := optim.NewSGD(segs, 0.05, optim.WithMomentum(0.9))
			if err != nil {
				return nil, err
			}
			return nn.WithOptimizer(sgd), nil
		}},
	}
	for _, u := range updates {
		t.Run(u.name, func(t *testing.T) {
			ctx := context.Background()
			build := gormlp.Fixed(1, batch)
			mc, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			md, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			oc, err := u.opt(mc)
			if err != nil {
				t.Fatal(err)
			}
			od, err := u.opt(md)
			if err != nil {
				t.Fatal(err)
			}
			cpu, err := nn.Compile(mc, build, oc)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			dev, err := tape.Compile(d, md, build, od)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			x, y := make([]float32, batch*gormlp.In), make([]float32, batch*gormlp.Out)
			var worstLoss float64
			for s := range steps {
				gormlp.Data(x, y, s*batch, batch)
				for _, p := range []interface {
					SetInput(string, []float32) error
				}{cpu, dev} {
					if err := p.SetInput("x", x); err != nil {
						t.Fatal(err)
					}
					if err := p.SetInput("y", y); err != nil {
						t.Fatal(err)
					}
				}
				if err := cpu.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if err := dev.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if s == 0 {
					if r := maxRel(md.Params.Grad, mc.Params.Grad); r > mlpTol {
						t.Fatalf("first gradients differ by %.3g (tolerance %g):\ndevice %v\ncpu    %v", r, mlpTol, md.Params.Grad, mc.Params.Grad)
					}
				}
				lc, _ := cpu.LossValue()
				ld, err := dev.LossValue()
				if err != nil {
					t.Fatal(err)
				}
				worstLoss = math.Max(worstLoss, maxRel([]float32{ld}, []float32{lc}))
				if err := cpu.Step(ctx); err != nil {
					t.Fatal(err)
				}
				if err := dev.Step(ctx); err != nil {
					t.Fatal(err)
				}
			}
			w := maxRel(md.Params.Data, mc.Params.Data)
			t.Logf("%d steps: losses differ by at most %.3g relative, weights by %.3g (tolerance %g)", steps, worstLoss, w, mlpTol)
			if worstLoss > mlpTol || w > mlpTol {
				t.Fatalf("device run differs from the CPU: losses %.3g, weights %.3g (tolerance %g)", worstLoss, w, mlpTol)
			}
			if md.Params.Data[0] == build1Weight(t) {
				t.Fatal("the weights did not change")
			}
		})
	}
}

func solver(i int) func(*nn.Model) (nn.BuildOption, error) {
	return func(*nn.Model) (nn.BuildOption, error) { return nn.WithSolver(gormlp.Solvers[i].New()), nil }
}

// build1Weight is the first element of the flat parameter buffer of a fresh model.
func build1Weight(t *testing.T) float32 {
	m, err := nn.NewGraphModel(gormlp.Fixed(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	return m.Params.Data[0]
}

// An op without a device kernel fails Compile, naming the op and its node.
func TestUnsupportedOpNamed(t *testing.T) {
	d := device(t)
	build := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", 2, 3)
		if err != nil {
			return nil, err
		}
		w, err := b.Learnable(G.NewMatrix(b.Graph, G.Float32, G.WithShape(3, 3), G.WithName("w"), G.WithInit(G.Ones())))
		if err != nil {
			return nil, err
		}
		m, err := G.Max(G.Must(G.Mul(x, w)), 1)
		if err != nil {
			return nil, err
		}
		return G.Sum(m)
	}
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tape.Compile(d, m, build)
	if err == nil || !strings.Contains(err.Error(), "MaxAlong[1]") || !strings.Contains(err.Error(), "has no device kernel") {
		t.Fatalf("Compile: %v, want the MaxAlong op named", err)
	}
	t.Log(err)
}

const noDeviceVar = "TAPE_TEST_NO_DEVICE"

// Without a GPU and without the fake libraries, opening the device fails at once with an
// error naming the driver library (tape.Compile then never starts).
func TestNoDeviceFailsAtOnce(t *testing.T) {
	if os.Getenv(noDeviceVar) == "1" {
		start := time.Now()
		d, err := cuda.Open(0)
		if err == nil {
			d.Close()
			t.Skip("this machine has a CUDA driver")
		}
		if _, err := tape.Compile(nil, nil, nil); err == nil || !strings.Contains(err.Error(), "no device") {
			t.Errorf("Compile without a device: %v", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("failing took %v", el)
		}
		t.Logf("cuda.Open: %v", err)
		if !strings.Contains(err.Error(), "libcuda") {
			t.Errorf("error does not name the driver library: %v", err)
		}
		return
	}
	if !cudatest.Cgo {
		t.Skip("built without cgo: cuda.Open says so (cuda's TestOpenWithoutCgo)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoDeviceFailsAtOnce$", "-test.v", "-test.count=1")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CUDA_DRIVER_LIBRARY=") && !strings.HasPrefix(e, "GPU_LIB_DIRS=") && !strings.HasPrefix(e, cudatest.EmulatorVar+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, noDeviceVar+"=1", "CUDA_DRIVER_LIBRARY="+t.TempDir()+"/libcuda.so.1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatal(err)
	}
}

// Memory is reused by liveness: a chain of 12 negations of a 64×256 tensor, whose backward
// needs no forward value, holds a few tensors at a time, not the chain's 26 values, and a Run
// returns everything it allocated.
func TestMemoryFreedAfterLastReader(t *testing.T) {
	d := device(t)
	const rows, cols, chain = 64, 256, 12
	build := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", rows, cols)
		if err != nil {
			return nil, err
		}
		w, err := b.Learnable(G.NewMatrix(b.Graph, G.Float32, G.WithShape(rows, cols), G.WithName("w"), G.WithInit(G.Ones())))
		if err != nil {
			return nil, err
		}
		y := G.Must(G.HadamardProd(x, w))
		for range chain {
			y = G.Must(G.Neg(y))
		}
		return G.Sum(y)
	}
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tape.Compile(d, m, build)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := d.MemoryStats().InUse
	d.ResetPeakMemory() // the device is the package's: earlier tests' peaks are not this Run's
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := d.MemoryStats()
	const tensorBytes = 4 * rows * cols
	all := int64(2*chain+2) * tensorBytes
	peak := st.PeakInUse - before
	t.Logf("peak %d KiB above the program's fixed memory; the chain's values are %d KiB", peak>>10, all>>10)
	if st.InUse != before {
		t.Errorf("a Run left %d bytes in use", st.InUse-before)
	}
	if peak > 4*tensorBytes {
		t.Errorf("peak %d bytes above the fixed memory, want at most 4 tensors of %d", peak, tensorBytes)
	}
}
