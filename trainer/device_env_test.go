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
//
// The device of this process (the world-1 runs) runs each launch's blocks on two threads
// (GP_EMU_BLOCK_THREADS, read at the process's first launch): the blocks of a launch are
// independent, as on a GPU, and a run of this process's ranks otherwise leaves one of the
// machine's two cores idle. launchJob clears it for the ranks it launches, which keep the
// emulator's own choice (one thread; two under cudatest.AsyncProcesses' seed).
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
	t.Setenv(emuBlockThreads, "2")
	if devices > 1 {
		t.Setenv("GP_FAKE_DEVICES", strconv.Itoa(devices))
	}
}

// emuBlockThreads names how many threads the emulator runs a launch's blocks on.
const emuBlockThreads = "GP_EMU_BLOCK_THREADS"

// removeEmulator deletes what emulatorEnv built outside the cache.
func removeEmulator() {
	if emuDir != "" {
		os.RemoveAll(emuDir)
	}
}
