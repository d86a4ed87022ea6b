package cudatest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

// SeedVar names the variable that makes the fake libcuda run streams asynchronously: each
// stream runs its work on its own thread, in order, with random delays drawn from this seed,
// and the stream-order checker watches every operation (see testdata/fakestreams.h). Unset,
// work runs at the call, as on a fully synchronous device. The fake reads it when it loads
// (a process a test starts); within a test binary Async switches it.
const SeedVar = "GP_EMU_SEED"

// DelayVar bounds one random delay of an asynchronous stream, in microseconds (default 200).
const DelayVar = "GP_EMU_DELAY_US"

// ReportVar names a file to which the fake driver of a process started with it appends a line
// when the process's streams first run asynchronously ("async pid N: seed S") and one for the
// first race its checker records ("race pid N: " and the race): how a test learns the verdict
// of the processes it starts (the ranks of a job), whose races Race cannot see. The fake reads
// it when it loads, with SeedVar.
const ReportVar = "GP_EMU_REPORT"

// Seeds are the seeds the TestAsyncStreams tests run under: the checker's verdicts do not
// depend on the seed, the interleavings (and so wrong results from a missing wait) do.
var Seeds = []uint64{1, 2, 3}

// Async makes the streams t's code creates from now on asynchronous with seed (t.Setenv, so t
// must not be parallel) and fails t at its end with the checker's first race, if any; races
// recorded before Async are cleared. It calls Require.
func Async(t testing.TB, seed uint64) {
	t.Helper()
	Require(t)
	prev := os.Getenv(SeedVar)
	t.Setenv(SeedVar, strconv.FormatUint(seed, 10)) // for processes the test starts
	if err := setSeed(true, seed); err != nil {
		t.Fatal(err)
	}
	if err := ResetRace(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, _ := strconv.ParseUint(prev, 10, 64)
		if err := setSeed(prev != "", p); err != nil {
			t.Error(err)
		}
		r, err := Race()
		if err != nil {
			t.Error(err)
		} else if r != "" {
			t.Errorf("seed %d: %s", seed, r)
		}
		_ = ResetRace()
	})
}

// AsyncProcesses makes the processes t starts from now on (they inherit the environment) run
// their streams asynchronously with seed under the checker (t.Setenv of SeedVar and ReportVar,
// so t must not be parallel), and fails t at its end with each race their checkers recorded,
// or, when t has not failed otherwise, if none of them ran a stream asynchronously (they never
// reached the asynchronous path); it logs how many did. It leaves this process's fake driver as it is (Async
// switches that) and does not need Main: the processes load the fake named in their
// environment.
func AsyncProcesses(t testing.TB, seed uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "emu-report")
	t.Setenv(SeedVar, strconv.FormatUint(seed, 10))
	t.Setenv(ReportVar, path)
	t.Cleanup(func() {
		if t.Skipped() {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("seed %d: the processes' checker report: %v", seed, err)
			return
		}
		async, races := 0, 0
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			switch {
			case strings.HasPrefix(l, "race "):
				t.Errorf("seed %d: %s", seed, l)
				races++
			case strings.HasPrefix(l, "async "):
				async++
			}
		}
		if async == 0 && !t.Failed() {
			t.Errorf("seed %d: no process this test started ran a stream asynchronously (%s=%s reached none)", seed, SeedVar, strconv.FormatUint(seed, 10))
		}
		t.Logf("seed %d: %d processes ran streams asynchronously, %d recorded a race", seed, async, races)
	})
}

// Test is a named test function, for RunAsync.
type Test struct {
	Name string
	Run  func(*testing.T)
}

// RunAsync runs each test as a subtest under every seed of Seeds with asynchronous streams
// (Async: a race the checker finds fails the subtest), and fails t when no operation ran on
// a stream's own thread, that is when the tests never reached the asynchronous path.
func RunAsync(t *testing.T, tests ...Test) {
	t.Helper()
	Require(t)
	for _, seed := range Seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			Async(t, seed)
			before, err := QueuedOps()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tests {
				t.Run(c.Name, c.Run)
			}
			if after, err := QueuedOps(); err != nil {
				t.Error(err)
			} else if after == before {
				t.Errorf("seed %d: no operation ran on an asynchronous stream", seed)
			}
		})
	}
}

// QueuedOps counts the operations the fake driver has run on a stream's own thread.
func QueuedOps() (int, error) {
	f, err := fakeSym("fakeQueuedOps")
	if err != nil {
		return 0, err
	}
	return dl.Call(f), nil
}

// setSeed switches the fake driver in this process (the variable is read only when it loads).
func setSeed(on bool, seed uint64) error {
	f, err := fakeSym("fakeSetSeed")
	if err != nil {
		return err
	}
	delay := uint64(200)
	if v, err := strconv.ParseUint(os.Getenv(DelayVar), 10, 32); err == nil {
		delay = v
	}
	o := uintptr(0)
	if on {
		o = 1
	}
	dl.Call(f, o, uintptr(seed), uintptr(delay))
	return nil
}

// Race returns the first stream-order race the fake driver's checker recorded since the last
// ResetRace: both operations, their streams and the buffer's bytes; "" for none.
func Race() (string, error) {
	f, err := fakeSym("fakeRaceText")
	if err != nil {
		return "", err
	}
	return dl.CallString(f, 0), nil
}

// ResetRace forgets the recorded race.
func ResetRace() error {
	f, err := fakeSym("fakeRaceText")
	if err != nil {
		return err
	}
	dl.CallString(f, 1)
	return nil
}

// HoldStream stops (hold true) or resumes an asynchronous stream (a CUstream of the fake
// driver) before its next operation, so that a test can keep work pending while the host
// goes on. It fails for a synchronous stream (one created without SeedVar).
func HoldStream(stream uintptr, hold bool) error {
	f, err := fakeSym("fakeStreamHold")
	if err != nil {
		return err
	}
	h := uintptr(0)
	if hold {
		h = 1
	}
	if dl.Call(f, stream, h) != 0 {
		return fmt.Errorf("cudatest: stream %#x is not asynchronous (create it with %s set)", stream, SeedVar)
	}
	return nil
}

var fake struct {
	once sync.Once
	lib  *dl.Lib
	err  error
}

// fakeSym resolves a test hook of the fake libcuda that Main built.
func fakeSym(name string) (dl.Func, error) {
	fake.once.Do(func() {
		p := os.Getenv("CUDA_DRIVER_LIBRARY")
		if os.Getenv(readyVar) != "1" || p == "" {
			fake.err = fmt.Errorf("cudatest: the fake libcuda is not installed (%s)", reason)
			return
		}
		fake.lib, fake.err = dl.Open([]string{p})
	})
	if fake.err != nil {
		return nil, fake.err
	}
	return fake.lib.Sym(name)
}
