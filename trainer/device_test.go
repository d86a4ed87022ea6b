package trainer

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deviceTol bounds the per-step loss difference between -device cuda (on the emulator of
// kernels.cu and the fake libraries) and the CPU, relative to the loss. The device's norms
// and losses accumulate in float32 where the CPU's accumulate in float64, and its GEMMs sum
// in other orders; cuda/tape's TestModelsMatchCPU measures the per-op effect (~1e-6 on the
// loss), and 3 SGD steps of resnet18 keep it well under this; a wrong kernel is off by far
// more.
const deviceTol = 1e-4

// -device cuda trains resnet18 (-strategy none) with the losses of -device cpu, through
// cuda/tape on the kernel emulator. The fake libraries are built here and named in the
// environment before the first cuda.Open of the process (the driver is loaded once).
func TestDeviceCUDAMatchesCPU(t *testing.T) {
	emulatorEnv(t, 1)

	base := tinyConfig(t, t.TempDir())
	// 3 steps at a small learning rate. Measured: step losses within 1.7e-6, 1.4e-6, 4.5e-5.
	// A 4th step differs by 6e-3 (3e-4 at lr 5e-4). That is this configuration amplifying
	// rounding, not a kernel: on the CPU alone, the same run with the learning rate changed
	// by a relative 1e-5 gives losses that differ by 1.6e-6, 5.6e-5, 2.3e-3 and 7.7e-2 at
	// steps 2 to 5 (about 40x a step: BatchNorm normalises 8 values on layer4's 1x1 maps), so
	// the float32 rounding differences of the device's kernels (~1e-7) reach 1e-3 by step 4.
	// Comparing further would compare chaos, so the test stops at 3 steps.
	base.Epochs, base.MaxSteps, base.Strategy, base.LR = 1, 3, "none", 0.005
	cpu := runWorld(t, 1, base)[0]
	dev := base
	dev.Out, dev.Device = t.TempDir(), "cuda"
	gpu := runWorld(t, 1, dev)[0]
	if len(gpu.LossHistory) != len(cpu.LossHistory) || len(cpu.LossHistory) == 0 {
		t.Fatalf("%d losses on the device, %d on the CPU", len(gpu.LossHistory), len(cpu.LossHistory))
	}
	var worst float64
	for i, want := range cpu.LossHistory {
		rel := math.Abs(gpu.LossHistory[i]-want) / math.Abs(want)
		worst = max(worst, rel)
		if rel > deviceTol {
			t.Fatalf("step %d: loss %.7f on the device, %.7f on the CPU (device %v, CPU %v)", i, gpu.LossHistory[i], want, gpu.LossHistory, cpu.LossHistory)
		}
	}
	t.Logf("losses of %d steps within %.1e of the CPU's (device %v, CPU %v); top-1 %.1f%% and %.1f%%", len(cpu.LossHistory), worst, gpu.LossHistory, cpu.LossHistory, gpu.Top1, cpu.Top1)
	if gpu.Evaluated != cpu.Evaluated || gpu.Top1 != cpu.Top1 {
		t.Errorf("validation: device evaluated=%v top-1 %v, CPU evaluated=%v top-1 %v", gpu.Evaluated, gpu.Top1, cpu.Evaluated, cpu.Top1)
	}

	// What the device does not support says so before anything runs.
	for _, s := range []string{"zero3"} {
		c := tinyConfig(t, t.TempDir())
		// AdamW: what ZeRO-3 on the device steps (the ImageNet recipe's choice there).
		c.Strategy, c.Device, c.Offload, c.Optimizer = s, "cuda", "disk", "adamw"
		_, err := New(c.options(io.Discard)...)
		if err == nil || !strings.Contains(err.Error(), "is not supported on the device") {
			t.Errorf("-strategy %s -device cuda -offload disk: %v, want \"is not supported on the device\"", s, err)
		}
	}
}

// -device cuda on a machine without the driver ends the process at once, naming the library.
func TestDeviceCUDAWithoutDriverFailsAtOnce(t *testing.T) {
	cfg := tinyConfig(t, t.TempDir())
	cfg.Device = "cuda"
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GP_TRAINER_TEST_WORKER="+string(js), "CUDA_DRIVER_LIBRARY="+filepath.Join(t.TempDir(), "libcuda.so.1"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the trainer ran with -device cuda and no driver:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "libcuda") && !strings.Contains(out.String(), "without cgo") {
		t.Fatalf("the error does not name the library:\n%s", out.String())
	}
	if took > 10*time.Second {
		t.Fatalf("failed after %v, want at once", took)
	}
	t.Logf("failed in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(out.String()))
}
