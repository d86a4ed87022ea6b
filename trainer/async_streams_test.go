package trainer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// TestAsyncStreamsTrainerMatrix runs rows of TestDeviceMatrix that take each device strategy
// once (resnet8: none fp32 at world 1, ddp bf16, zero3 fp32 and zero3 -offload cpu fp16 at
// world 2) and Swin's kernels, clipping and the replicated engine's fp16 GradScaler
// (swin_test: none fp32, ddp fp16), with the streams of every rank's process asynchronous
// under each seed of cudatest.Seeds: each stream on its own thread with random delays, the
// stream-order checker failing any op that touches bytes another stream may still be using.
// Every device run is a launched job (world 1 too: this process's fake driver, loaded by an
// earlier test, would not see the seed), and cudatest.AsyncProcesses fails the row with each
// race a rank's checker recorded, or when no rank ran a stream asynchronously. The
// equalities are the matrix's: each step's loss within matrixTol (matrixAmpTol under -amp)
// of the CPU's and, under fp16, the same loss scales (compareSteps); for none and ddp the
// final model tensors within matrixParamTol in fp32 (compareParams; logged under -amp). The
// CPU references do not depend on the seed and run once.
func TestAsyncStreamsTrainerMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: trains resnet8 and swin_test 18 times on the emulator")
	}
	emulatorEnv(t, 1)
	start := time.Now()
	resnet, swin := matrixArchNamed(t, "resnet8"), matrixArchNamed(t, "swin_test")
	rows := []struct {
		arch matrixArch
		s    matrixStrategy
		mode string
	}{
		{resnet, matrixStrategyNamed(t, "none"), ""},
		{resnet, matrixStrategyNamed(t, "ddp"), "bf16"},
		{resnet, matrixStrategyNamed(t, "zero3"), ""},
		{resnet, matrixStrategyNamed(t, "zero3-offload-cpu"), "fp16"},
		{swin, matrixStrategyNamed(t, "none"), ""},
		{swin, matrixStrategyNamed(t, "ddp"), "fp16"},
	}
	cpuRuns := map[string]matrixRun{} // the matrix's CPU references (sharedRun)
	for _, r := range rows {
		cfg := r.arch.config(t)
		cfg.Strategy, cfg.AMP = r.s.strategy, r.mode
		dir, _, _ := sharedRun(t, r.s.world, cfg)
		cpuRuns[r.arch.name+"/"+r.s.name+"/"+r.mode] = matrixRun{losses: metricsByStep(t, dir), dir: dir}
	}
	t.Logf("CPU references: %v", time.Since(start).Round(time.Millisecond))
	for _, seed := range cudatest.Seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			for _, r := range rows {
				t.Run(r.arch.name+"/"+r.s.name+"/"+cmp.Or(r.mode, "fp32"), func(t *testing.T) {
					cudatest.AsyncProcesses(t, seed)
					ref := cpuRuns[r.arch.name+"/"+r.s.name+"/"+r.mode]
					dev := r.arch.config(t)
					dev.Strategy, dev.Offload, dev.AMP = r.s.strategy, r.s.offload, r.mode
					dev.Out, dev.Device = t.TempDir(), "cuda"
					began := time.Now()
					var out string
					var err error
					if r.s.world == 1 {
						out, err = launchJob(r.s.world, dev)
					} else {
						_, out, err = trainOn(t, r.s.world, dev)
					}
					took := time.Since(began)
					if err != nil {
						t.Fatalf("device run failed: %v\n%s", err, out)
					}
					tol := matrixTol
					if r.mode != "" {
						tol = matrixAmpTol
					}
					if n := len(metricsByStep(t, dev.Out)); n != matrixSteps {
						t.Fatalf("%d steps on the device, want %d", n, matrixSteps)
					}
					worst := compareSteps(t, ref.dir, dev.Out, tol)
					if r.s.strategy == "zero3" {
						t.Logf("%v: losses of %d steps within %.1e of the CPU's", took.Round(time.Millisecond), matrixSteps, worst)
						return
					}
					n, whole, name, pw := compareParams(t, ref.dir, dev.Out)
					if r.mode == "" && whole > matrixParamTol {
						t.Errorf("final parameters differ from the CPU's by %.1e (norm of the difference over the norm), tolerance %.0e; worst tensor %s by %.1e", whole, matrixParamTol, name, pw)
					}
					t.Logf("%v: losses of %d steps within %.1e of the CPU's, %d model tensors within %.1e (worst tensor %s %.1e)", took.Round(time.Millisecond), matrixSteps, worst, n, whole, name, pw)
				})
			}
		})
	}
	t.Logf("CPU references and device rows: %v", time.Since(start).Round(time.Second))
}

// matrixArchNamed is the row of matrixArchs with that name.
func matrixArchNamed(t *testing.T, name string) matrixArch {
	for _, a := range matrixArchs {
		if a.name == name {
			return a
		}
	}
	t.Fatalf("no architecture %q in matrixArchs", name)
	return matrixArch{}
}

// matrixStrategyNamed is the row of matrixStrategies with that name.
func matrixStrategyNamed(t *testing.T, name string) matrixStrategy {
	for _, s := range matrixStrategies {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no strategy %q in matrixStrategies", name)
	return matrixStrategy{}
}

// launchJob runs cfg as a job of world processes launched as gprun launches them, at any
// world size (trainOn runs world 1 in this process), and returns their output. The ranks
// run the emulator's blocks as it chooses (emulatorEnv's setting for this process cleared):
// a world-2 job's two processes already fill the two cores.
func launchJob(world int, cfg runConfig) (string, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: world, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env:    []string{"GP_TRAINER_TEST_WORKER=" + string(js), "OPENBLAS_NUM_THREADS=1", "CUDA_VISIBLE_DEVICES=0", emuBlockThreads + "="},
		Stdout: &out, Stderr: &out,
	})
	return out.String(), err
}
