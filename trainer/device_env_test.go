package trainer

import (
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// The fake GPU libraries and the kernel emulator (cuda/cudatest.Cached) are built once per
// machine and these sources, the first time a device test of any package asks: every device
// test of the process, and the worker processes they launch, load the same files. emuDir is
// set only where the cache could not be written and the build went to a temporary folder,
// which TestMain removes.
var (
	emuOnce sync.Once
	emuDir  string
	emuEnv  map[string]string
	emuErr  error
)

// emulatorEnv names the fake libraries and the emulator in the environment (t.Setenv, before
// the process's first cuda.Open, and inherited by the ranks a test launches), with
// GP_FAKE_DEVICES=devices when devices > 1, or skips the test, saying why (a build without
// cgo, no C or C++ compiler).
func emulatorEnv(t *testing.T, devices int) {
	t.Helper()
	if !cudatest.Cgo {
		t.Skip("built without cgo: the device cannot load")
	}
	emuOnce.Do(func() {
		var libs cudatest.Libs
		libs, emuDir, emuErr = cudatest.Cached(true)
		emuEnv = libs.Env()
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

// removeEmulator deletes what emulatorEnv built outside the cache.
func removeEmulator() {
	if emuDir != "" {
		os.RemoveAll(emuDir)
	}
}
