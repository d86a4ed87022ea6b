// Package cudatest builds fake libcuda.so.1 and libnccl.so.2 libraries from C sources with
// the system C compiler, so that tests exercise the real dlopen path of the CUDA packages
// and the NCCL backend on machines without a GPU.
//
// The fake driver keeps "device" memory in host memory and completes streams at once; the
// fake NCCL runs real collectives between the ranks of one process (see the C sources).
// Both are loaded through the same environment variables users set:
//
//	func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
package cudatest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

//go:embed testdata/fakecuda.c
var fakeCuda string

//go:embed testdata/fakenccl.c
var fakeNCCL string

//go:embed testdata/fakecublas.c
var fakeCublas string

// Build compiles the fake libraries into dir (libcuda.so.1, libnccl.so.2, libcublas.so.12)
// and returns the paths of the first two. It fails when no C compiler ($CC, else cc) is
// found.
func Build(dir string) (cudaLib, ncclLib string, err error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", "", fmt.Errorf("cudatest: no C compiler to build the fake GPU libraries: %w", err)
	}
	for _, l := range []struct{ name, src string }{{"libcuda.so.1", fakeCuda}, {"libnccl.so.2", fakeNCCL}, {"libcublas.so.12", fakeCublas}} {
		src := filepath.Join(dir, l.name+".c")
		if err := os.WriteFile(src, []byte(l.src), 0o644); err != nil {
			return "", "", fmt.Errorf("cudatest: %w", err)
		}
		out, err := exec.Command(cc, "-shared", "-fPIC", "-pthread", "-O1", "-o", filepath.Join(dir, l.name), src).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("cudatest: %s %s: %v\n%s", cc, l.name, err, out)
		}
	}
	return filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "libnccl.so.2"), nil
}

// Main builds the fakes into a temporary folder, points CUDA_DRIVER_LIBRARY, NCCL_LIBRARY and
// CUBLAS_LIBRARY at them and runs the tests. Without a C compiler or without cgo it runs the tests with the
// variables unset; tests then call Require to skip.
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cudatest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if !dl.Available {
		reason = dl.ErrNoCgo.Error()
	} else if c, n, err := Build(dir); err == nil {
		os.Setenv("CUDA_DRIVER_LIBRARY", c)
		os.Setenv("NCCL_LIBRARY", n)
		os.Setenv("CUBLAS_LIBRARY", filepath.Join(dir, "libcublas.so.12"))
		os.Setenv(readyVar, "1")
	} else {
		reason = err.Error()
	}
	return m.Run()
}

const readyVar = "GP_CUDATEST_FAKES"

var reason = "cudatest.Main did not run"

// Require skips t unless Main installed the fake libraries (it needs cgo and a C compiler).
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv(readyVar) != "1" {
		t.Skipf("fake GPU libraries unavailable: %s", reason)
	}
}

// Cgo reports whether this build has cgo, without which the CUDA packages cannot load any
// library and report "built without cgo".
const Cgo = dl.Available
