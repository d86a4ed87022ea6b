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

// -device cuda -strategy zero3 -opt adamw at world size 2, as two processes launched as
// gprun launches them, trains resnet8 3 steps with the losses of the CPU's zero3 at world
// size 2, with the optimizer on the device and with -offload cpu: each rank's shard of the
// parameters and AdamW state (on the device, or the CPU's AdamW over pinned memory), the
// units all-gathered and the gradients reduce-scattered by the fake NCCL across the
// processes (cuda/devzero). Tolerance deviceTol: the device's kernels round differently
// from the CPU's (~1e-7 per op), which 3 steps keep far below it; a unit gathered from the
// wrong shard or a shard not stepped changes the second loss by far more.
func TestDeviceZero3World2MatchesCPU(t *testing.T) {
	emulatorEnv(t, 1)

	base := tinyConfig(t, t.TempDir())
	base.Arch, base.Epochs, base.MaxSteps, base.Strategy, base.Optimizer, base.LR, base.PrintFreq = "resnet8", 1, 3, "zero3", "adamw", 0.001, 1
	runWorld(t, 2, base)
	cpu := metricsByStep(t, base.Out)

	for _, offload := range []string{"", "cpu"} {
		dev := base
		dev.Out, dev.Device, dev.Offload = t.TempDir(), "cuda", offload
		js, err := json.Marshal(dev)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		err = launch.Run(ctx, launch.Config{
			NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
			Env:    []string{"GP_TRAINER_TEST_WORKER=" + string(js), "OPENBLAS_NUM_THREADS=1", "CUDA_VISIBLE_DEVICES=0"},
			Stdout: &out, Stderr: &out,
		})
		cancel()
		if err != nil {
			t.Fatalf("-offload %q: device job failed: %v\n%s", offload, err, out.String())
		}
		gpu := metricsByStep(t, dev.Out)
		if len(gpu) != len(cpu) || len(cpu) == 0 {
			t.Fatalf("-offload %q: %d losses on the device, %d on the CPU", offload, len(gpu), len(cpu))
		}
		var worst float64
		for i, want := range cpu {
			rel := math.Abs(gpu[i]-want) / math.Abs(want)
			worst = max(worst, rel)
			if rel > deviceTol {
				t.Fatalf("-offload %q: step %d: loss %.7f on the devices, %.7f on the CPU (devices %v, CPU %v)", offload, i+1, gpu[i], want, gpu, cpu)
			}
		}
		t.Logf("world 2, device ZeRO-3 over NCCL, -offload %q: losses of %d steps within %.1e of the CPU's ZeRO-3 (devices %v, CPU %v)", offload, len(cpu), worst, gpu, cpu)
	}
}
