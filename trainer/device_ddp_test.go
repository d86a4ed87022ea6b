package trainer

import (
	"math"
	"testing"
)

// -device cuda -strategy ddp at world size 2, as two processes launched as gprun launches
// them, trains resnet8 4 steps with the losses of the CPU's ddp at world size 2: each rank's
// parameters, gradients and optimizer on its device (the emulator of kernels.cu), the
// buckets all-reduced by the fake NCCL across the processes on the device path
// (cuda/devddp), the per-bucket SGD update on the device. With -comm-hook powersgd (rank 1,
// compressing from the third step, whose update the fourth loss shows) the hook runs on host copies of the device's buckets
// and must give the CPU's PowerSGD losses. Tolerance deviceTol: the device's kernels round
// differently from the CPU's (~1e-7 per op), which 4 steps keep far below it; a bucket not
// reduced or not divided by the world size changes the second loss by 1e-2 and more.
// CUDA_VISIBLE_DEVICES=0 gives each rank the fake driver's only device.
func TestDeviceDDPWorld2MatchesCPU(t *testing.T) {
	emulatorEnv(t, 1)
	var plain []float64 // the CPU's losses without a hook
	for _, hook := range []CommHookConfig{{Name: "none"}, {Name: "powersgd", PowerSGDRank: 1, PowerSGDStartIter: 2}} {
		t.Run(hook.Name, func(t *testing.T) {
			base := tinyConfig(t, t.TempDir())
			base.Arch, base.Epochs, base.MaxSteps, base.Strategy, base.LR, base.PrintFreq = "resnet8", 1, 4, "ddp", 0.005, 1
			base.CommHook = hook
			runWorld(t, 2, base)
			dev := base
			dev.Out, dev.Device = t.TempDir(), "cuda"
			runDeviceWorld(t, 2, dev)
			worst := compareSteps(t, base.Out, dev.Out, deviceTol)
			cpu, gpu := metricsByStep(t, base.Out), metricsByStep(t, dev.Out)
			t.Logf("world 2, device DDP over NCCL, hook %s: losses of %d steps within %.1e of the CPU's DDP (devices %v, CPU %v)", hook.Name, len(cpu), worst, gpu, cpu)
			if hook.Name == "none" {
				plain = cpu
				return
			}
			// The hook must show at this tolerance, or a device that ignored it would pass.
			var apart float64
			for i := range min(len(gpu), len(plain)) {
				apart = max(apart, math.Abs(gpu[i]-plain[i])/math.Abs(plain[i]))
			}
			if apart <= deviceTol {
				t.Fatalf("device losses %v within %.1e of the CPU's without the hook %v (tolerance %.0e): the hook had no effect", gpu, apart, plain, deviceTol)
			}
			t.Logf("%.1e from the CPU's losses without the hook", apart)
		})
	}
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
	worst := compareSteps(t, base.Out, dev.Out, deviceTol)
	gpu := metricsByStep(t, dev.Out)
	t.Logf("DataParallel over 2 devices: losses of %d steps within %.1e of the CPU's DataParallel (devices %v, CPU %v)", len(cpu), worst, gpu, cpu)
}
