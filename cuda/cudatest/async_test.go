package cudatest_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/driver"
)

// childVar makes the test binary a child process that runs one scene on the fake driver
// instead of the tests: "ordered" or "unordered".
const childVar = "GP_CUDATEST_CHILD"

func TestMain(m *testing.M) {
	if scene := os.Getenv(childVar); scene != "" {
		if err := child(scene); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		// The child exits 0 whatever the driver said, as a rank that dropped an error
		// would: the verdict must reach the test through the report alone.
		os.Exit(0)
	}
	os.Exit(cudatest.Main(m))
}

// child writes a buffer on one stream and copies it on another, with the second stream
// ordered after the first by a host synchronisation (ordered) or not at all (unordered,
// the checker's race).
func child(scene string) error {
	runtime.LockOSThread()
	dev, err := driver.GetDevice(0)
	if err != nil {
		return err
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return err
	}
	a, err := ctx.MemAlloc(1024)
	if err != nil {
		return err
	}
	b, err := ctx.MemAlloc(1024)
	if err != nil {
		return err
	}
	s1, err := ctx.StreamCreate()
	if err != nil {
		return err
	}
	s2, err := ctx.StreamCreate()
	if err != nil {
		return err
	}
	if err := ctx.MemsetD32Async(a, 1, 256, s1); err != nil {
		return err
	}
	if scene == "ordered" {
		if err := ctx.StreamSynchronize(s1); err != nil {
			return err
		}
	}
	if err := ctx.CopyDtoDAsync(b, a, 1024, s2); err != nil {
		return err
	}
	return ctx.StreamSynchronize(s2)
}

// recorder is a testing.TB whose errors and cleanups the test keeps, to see what
// AsyncProcesses would fail a test with.
type recorder struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Failed() bool     { return len(r.errs) > 0 }
func (r *recorder) Skipped() bool    { return false }

// A process the test starts runs its streams asynchronously with the seed and reports to
// the test: an unordered copy in the child is a race that fails the test naming both ops and
// streams, although the child exits 0; the same copy after a host synchronisation is not; a
// child that never creates a stream is "no process ran a stream asynchronously".
func TestAsyncStreamsVerdictOfChildProcesses(t *testing.T) {
	cudatest.Require(t)
	cases := []struct {
		scene string
		want  []string // in AsyncProcesses' errors; none: no error
	}{
		{"ordered", nil},
		{"unordered", []string{"race pid", "cuMemcpyDtoDAsync on stream", "reads bytes", "cuMemsetD32Async on stream", "may still be writing them"}},
		{"none", []string{"no process this test started ran a stream asynchronously"}},
	}
	for _, seed := range cudatest.Seeds {
		for _, c := range cases {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, c.scene), func(t *testing.T) {
				r := &recorder{TB: t}
				cudatest.AsyncProcesses(r, seed)
				if c.scene != "none" {
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), childVar+"="+c.scene)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("child: %v\n%s", err, out)
					}
				}
				for i := len(r.cleanups) - 1; i >= 0; i-- {
					r.cleanups[i]()
				}
				got := strings.Join(r.errs, "\n")
				if c.want == nil && got != "" {
					t.Fatalf("AsyncProcesses failed an ordered run: %s", got)
				}
				for _, w := range c.want {
					if !strings.Contains(got, w) {
						t.Errorf("AsyncProcesses' errors do not say %q:\n%s", w, got)
					}
				}
				if got != "" {
					t.Logf("%s", got)
				}
			})
		}
	}
}
