package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// -device cuda -strategy ddp at world size 2, as two processes launched as gprun launches
// them, trains resnet8 3 steps with the losses of the CPU's ddp at world size 2: each rank's
// parameters, gradients and optimizer on its device (the emulator of kernels.cu), the
// buckets all-reduced by the fake NCCL across the processes on the device path
// (cuda/devddp), the per-bucket SGD update on the device. Tolerance deviceTol: the device's
// kernels round differently from the CPU's (~1e-7 per op), which 3 steps keep far below it;
// a bucket not reduced or not divided by the world size changes the second loss by 1e-2 and
// more. CUDA_VISIBLE_DEVICES=0 gives each rank the fake driver's only device.
func TestDeviceDDPWorld2MatchesCPU(t *testing.T) {
	emulatorEnv(t, 1)

	base := tinyConfig(t, t.TempDir())
	base.Arch, base.Epochs, base.MaxSteps, base.Strategy, base.LR, base.PrintFreq = "resnet8", 1, 3, "ddp", 0.005, 1
	runWorld(t, 2, base)
	cpu := metricsByStep(t, base.Out)

	dev := base
	dev.Out, dev.Device = t.TempDir(), "cuda"
	js, err := json.Marshal(dev)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    []string{"GP_TRAINER_TEST_WORKER=" + string(js), "OPENBLAS_NUM_THREADS=1", "CUDA_VISIBLE_DEVICES=0"},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatalf("device job failed: %v\n%s", err, out.String())
	}
	gpu := metricsByStep(t, dev.Out)
	if len(gpu) != len(cpu) || len(cpu) == 0 {
		t.Fatalf("%d losses on the device, %d on the CPU", len(gpu), len(cpu))
	}
	var worst float64
	for i, want := range cpu {
		rel := math.Abs(gpu[i]-want) / math.Abs(want)
		worst = max(worst, rel)
		if rel > deviceTol {
			t.Fatalf("step %d: loss %.7f on the devices, %.7f on the CPU (devices %v, CPU %v)", i+1, gpu[i], want, gpu, cpu)
		}
	}
	t.Logf("world 2, device DDP over NCCL: losses of %d steps within %.1e of the CPU's DDP (devices %v, CPU %v)", len(cpu), worst, gpu, cpu)
}

// -device cuda -strategy dp -dp-replicas 2 (cuda/devdp: two devices of the fake driver in
// one process, GP_FAKE_DEVICES=2) trains resnet8 3 steps with the losses of -device cpu
// -strategy dp: the same chunks, the replica other than the master with private BatchNorm
// statistics, the gradients summed onto the master weighted by chunk size. Tolerance
// deviceTol, as above.
func TestDeviceDPMatchesCPU(t *testing.T) {
	emulatorEnv(t, 2)

	base := tinyConfig(t, t.TempDir())
	base.Arch, base.Epochs, base.MaxSteps, base.Strategy, base.DPReplicas, base.LR, base.PrintFreq = "resnet8", 1, 3, "dp", 2, 0.005, 1
	runWorld(t, 1, base)
	cpu := metricsByStep(t, base.Out)
	dev := base
	dev.Out, dev.Device = t.TempDir(), "cuda"
	_, b32 := gemmCalls()
	runWorld(t, 1, dev)
	_, n32 := gemmCalls()
	if n32 == b32 {
		t.Fatal("no GEMM or convolution ran on the devices")
	}
	gpu := metricsByStep(t, dev.Out)
	if len(gpu) != len(cpu) || len(cpu) == 0 {
		t.Fatalf("%d losses on the devices, %d on the CPU", len(gpu), len(cpu))
	}
	var worst float64
	for i, want := range cpu {
		rel := math.Abs(gpu[i]-want) / math.Abs(want)
		worst = max(worst, rel)
		if rel > deviceTol {
			t.Fatalf("step %d: loss %.7f on the devices, %.7f on the CPU (devices %v, CPU %v)", i+1, gpu[i], want, gpu, cpu)
		}
	}
	t.Logf("DataParallel over 2 devices: losses of %d steps within %.1e of the CPU's DataParallel (devices %v, CPU %v)", len(cpu), worst, gpu, cpu)
}
