package trainer

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// The fake GPU libraries and the kernel emulator (cuda/cudatest) are built once per test
// binary, the first time a device test asks, into emuDir, which TestMain removes: every
// device test of the process, and the worker processes they launch, load the same files (a
// process loads the driver once anyway), and the C++ build of kernels.cu is paid once.
var (
	emuOnce sync.Once
	emuDir  string
	emuEnv  map[string]string
	emuErr  error
)

// emulatorEnv names the fake libraries and the emulator in the environment (t.Setenv, before
// the process's first cuda.Open), with GP_FAKE_DEVICES=devices when devices > 1, or skips
// the test, saying why (a build without cgo, no C or C++ compiler).
func emulatorEnv(t *testing.T, devices int) {
	t.Helper()
	if !cudatest.Cgo {
		t.Skip("built without cgo: the device cannot load")
	}
	emuOnce.Do(func() {
		if emuDir, emuErr = os.MkdirTemp("", "trainer-emu"); emuErr != nil {
			return
		}
		var emu, libcuda, libnccl string
		if emu, emuErr = cudatest.BuildEmulator(emuDir); emuErr != nil {
			return
		}
		if libcuda, libnccl, emuErr = cudatest.Build(emuDir); emuErr != nil {
			return
		}
		emuEnv = map[string]string{
			"CUDA_DRIVER_LIBRARY": libcuda, "NCCL_LIBRARY": libnccl,
			"CUBLAS_LIBRARY":     filepath.Join(emuDir, "libcublas.so.12"),
			"CUDNN_LIBRARY":      filepath.Join(emuDir, "libcudnn.so.9"),
			cudatest.EmulatorVar: emu,
		}
	})
	if emuErr != nil {
		t.Skip(emuErr)
	}
	for k, v := range emuEnv {
		t.Setenv(k, v)
	}
	if devices > 1 {
		t.Setenv("GP_FAKE_DEVICES", strconv.Itoa(devices))
	}
}

// removeEmulator deletes what emulatorEnv built.
func removeEmulator() {
	if emuDir != "" {
		os.RemoveAll(emuDir)
	}
}
