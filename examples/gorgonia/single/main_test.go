package main

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

func TestMain(m *testing.M) { os.Exit(cudatest.MainEmulated(m)) }

// deviceTol bounds each step's loss difference between -device cuda and the CPU, relative
// to the loss. The device sums in other orders than gorgonia's CPU kernels (cuBLAS's GEMMs,
// the mean's reduction), each float32 sum differing by a few ulps (~1e-7 relative), which
// Adam's steps carry on. Measured over 20 steps: 1.2e-7; the device's learning rate 1%
// higher is off by 5e-4 at the second step.
const deviceTol = 1e-5

// -device cuda (on the emulator of kernels.cu and the fake libraries) trains the
// perceptron with the losses of the plain gorgonia TapeMachine run, from the same initial
// weights.
func TestDeviceMatchesCPU(t *testing.T) {
	cudatest.Require(t)
	const steps = 20
	rng := rand.New(rand.NewPCG(7, 1))
	w0 := make([]float32, in*hidden+hidden*out)
	for i := range w0 {
		w0[i] = float32(rng.Float64()-0.5) * 0.6
	}
	cpu, err := run(steps, w0)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := runOn("cuda", steps, w0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dev) != steps || len(cpu) != steps {
		t.Fatalf("%d losses on the device, %d on the CPU, want %d", len(dev), len(cpu), steps)
	}
	var worst float64
	for i := range cpu {
		rel := math.Abs(float64(dev[i])-float64(cpu[i])) / math.Abs(float64(cpu[i]))
		worst = max(worst, rel)
		if rel > deviceTol {
			t.Fatalf("step %d: loss %v on the device, %v on the CPU: %.1e apart, tolerance %.0e\ndevice %v\nCPU    %v", i, dev[i], cpu[i], rel, deviceTol, dev, cpu)
		}
	}
	if mean(cpu[steps-5:]) >= mean(cpu[:5]) {
		t.Fatalf("the CPU run did not learn: losses %v", cpu)
	}
	t.Logf("%d steps: losses within %.1e of the CPU's (device %v, CPU %v)", steps, worst, dev, cpu)
}

// -device names a GPU or fails before training.
func TestDeviceFlagRefusesUnknown(t *testing.T) {
	for _, d := range []string{"gpu", "cuda:x", "cuda:-1"} {
		if _, err := runOn(d, 1, nil); err == nil {
			t.Errorf("-device %s trained", d)
		}
	}
}

func mean(v []float32) float64 {
	var s float64
	for _, e := range v {
		s += float64(e)
	}
	return s / float64(len(v))
}
