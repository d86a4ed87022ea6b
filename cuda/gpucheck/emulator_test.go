package gpucheck

import (
	"os"
	"os/exec"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

const emulatedVar = "GPUCHECK_EMULATED"

// TestOnCPUEmulator runs this package's GPU checks on a machine without a GPU: the fake
// libcuda, cuBLAS, cuDNN and NCCL of cuda/cudatest, with kernel launches executed by the CPU
// emulator of kernels.cu. It proves the kernels' logic, the argument passing and the whole
// training steps of ResNets and Swins through cuda/tape against the CPU before a GPU is lent
// (the tests that call realGPUOnly skip: full-size models and throughput); it proves nothing about PTX
// codegen or the real libraries, which the GPU run (REQUIRE_GPU=1) does.
func TestOnCPUEmulator(t *testing.T) {
	if os.Getenv(emulatedVar) == "1" {
		t.Skip("already on the emulator")
	}
	if os.Getenv("REQUIRE_GPU") == "1" {
		t.Skip("REQUIRE_GPU=1: checking the real GPU instead")
	}
	if !cudatest.Cgo {
		t.Skip("built without cgo")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	libs, temp, err := cudatest.Cached(true)
	if temp != "" {
		defer os.RemoveAll(temp)
	}
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.v", "-test.count=1", "-test.timeout=15m")
	cmd.Env = append(os.Environ(), "REQUIRE_GPU=1", emulatedVar+"=1")
	for k, v := range libs.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("emulated run:\n%s", out)
	if err != nil {
		t.Fatalf("GPU checks on the CPU emulator: %v", err)
	}
}
