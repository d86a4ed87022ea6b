// Package cudatest builds fake libcuda.so.1 and libnccl.so.2 libraries from C sources with
// the system C compiler, so that tests exercise the real dlopen path of the CUDA packages
// and the NCCL backend on machines without a GPU.
//
// The fake driver keeps "device" memory in host memory and runs work at the call, or, with
// $GP_EMU_SEED set (Async, RunAsync; AsyncProcesses for the processes a test starts), on one
// thread per stream with random delays while a checker fails any operation that touches
// bytes another stream may still be using (testdata/fakestreams.h); the fake NCCL runs real collectives between ranks in one process
// or in several (they meet in a shared-memory segment named by the unique id, so a test
// binary re-executed as the ranks of a job runs DDP over NCCL on the CPU; see
// testdata/fakenccl.c).
// Both are loaded through the same environment variables users set:
//
//	func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
package cudatest

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/kernels"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

//go:embed testdata/fakecuda.c
var fakeCuda string

//go:embed testdata/fakenccl.c
var fakeNCCL string

//go:embed testdata/fakecublas.c
var fakeCublas string

//go:embed testdata/fakecudnn.c
var fakeCudnn string

//go:embed testdata/fakestreams.h
var fakeStreams string

//go:embed testdata/emu.h
var emuHeader string

//go:embed testdata/emu_sched.cc
var emuSched string

// Build compiles the fake libraries into dir (libcuda.so.1, libnccl.so.2, libcublas.so.12, libcudnn.so.9)
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
	if err := os.WriteFile(filepath.Join(dir, "fakestreams.h"), []byte(fakeStreams), 0o644); err != nil {
		return "", "", fmt.Errorf("cudatest: %w", err)
	}
	for _, l := range []struct{ name, src string }{{"libcuda.so.1", fakeCuda}, {"libnccl.so.2", fakeNCCL}, {"libcublas.so.12", fakeCublas}, {"libcudnn.so.9", fakeCudnn}} {
		src := filepath.Join(dir, l.name+".c")
		if err := os.WriteFile(src, []byte(l.src), 0o644); err != nil {
			return "", "", fmt.Errorf("cudatest: %w", err)
		}
		out, err := exec.Command(cc, "-shared", "-fPIC", "-pthread", "-O2", "-I", dir, "-o", filepath.Join(dir, l.name), src, "-ldl", "-lm").CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("cudatest: %s %s: %v\n%s", cc, l.name, err, out)
		}
	}
	return filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "libnccl.so.2"), nil
}

// Main installs the fake libraries (Cached: built once per machine for these sources),
// points CUDA_DRIVER_LIBRARY, NCCL_LIBRARY, CUBLAS_LIBRARY and CUDNN_LIBRARY at them and runs
// the tests. Without a C compiler or without cgo it runs the tests with the variables unset;
// tests then call Require to skip. A fake that the compiler fails to build fails the test
// binary (exit status 1, the compiler's output on standard error).
func Main(m *testing.M) int { return install(m, false) }

func install(m *testing.M, emulator bool) int {
	if !dl.Available {
		reason = dl.ErrNoCgo.Error()
		return m.Run()
	}
	libs, temp, err := Cached(emulator)
	if temp != "" {
		defer os.RemoveAll(temp)
	}
	if err != nil {
		if brokenSource(err) {
			return 1
		}
		reason = err.Error()
		return m.Run()
	}
	for k, v := range libs.Env() {
		os.Setenv(k, v)
	}
	os.Setenv(readyVar, "1")
	return m.Run()
}

// brokenSource reports (on standard error) a fake or the emulator that a compiler present
// failed to build: that fails the test binary instead of skipping every device test.
func brokenSource(err error) bool {
	if errors.Is(err, exec.ErrNotFound) {
		return false
	}
	fmt.Fprintln(os.Stderr, err)
	return true
}

// MainEmulated is Main with the kernel emulator too (BuildEmulator, $GP_FAKE_KERNELS), so
// that launches compute on the CPU: for tests that compare device results with the CPU. It
// needs a C++ compiler as well; without one the tests run with the fakes unset and Require
// skips them, saying why.
func MainEmulated(m *testing.M) int { return install(m, true) }

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

// EmulatorVar names the kernel emulator library that the fake libcuda runs launches with.
const EmulatorVar = "GP_FAKE_KERNELS"

// BuildEmulator compiles the CPU emulator of the cuda package's kernels (kernels.cu as C++
// with testdata/emu.h: each block's threads are fibers, __syncthreads switches between them)
// into dir and returns its path. Point $GP_FAKE_KERNELS at it before the fake libcuda's
// first launch to have launches compute. It needs a C++ compiler ($CXX, else c++).
func BuildEmulator(dir string) (string, error) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "c++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		return "", fmt.Errorf("cudatest: no C++ compiler for the kernel emulator: %w", err)
	}
	files := map[string]string{"emu.h": emuHeader, "cuda_fp16.h": "", "cuda_bf16.h": "", "kernels.cu": kernels.Source,
		"emu_sched.cc": emuSched, "emu.cc": "#include \"emu.h\"\n#include \"kernels.cu\"\n" + emuTable(kernels.Source) + "#include \"emu_sched.cc\"\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return "", fmt.Errorf("cudatest: %w", err)
		}
	}
	lib := filepath.Join(dir, "libkernels_emu.so")
	out, err := exec.Command(cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-I", dir, "-o", lib, filepath.Join(dir, "emu.cc")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cudatest: building the kernel emulator: %v\n%s", err, out)
	}
	return lib, nil
}

var (
	globalRe = regexp.MustCompile(`__global__\s+void\s+(\w+)\s*\(([^)]*)\)`)
	paramRe  = regexp.MustCompile(`^(.*?)\s*\b(\w+)$`)
)

// emuTable generates, for every kernel, a wrapper that unpacks cuLaunchKernel's parameter
// array, and the name-to-wrapper table emu_sched.cc looks kernels up in, with each
// parameter's access for the fake driver's stream-order checker: r for a const pointer
// (read), w for another pointer (written), - for a value.
func emuTable(src string) string {
	var b strings.Builder
	var names []string
	var syncs []bool
	var accesses []string
	locs := globalRe.FindAllStringIndex(src, -1)
	for k, m := range globalRe.FindAllStringSubmatch(src, -1) {
		name := m[1]
		end := len(src)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		body := src[locs[k][1]:end]
		syncs = append(syncs, strings.Contains(body, "block_sum") || strings.Contains(body, "block_max") || strings.Contains(body, "__syncthreads"))
		var args []string
		var access []byte
		for i, p := range strings.Split(m[2], ",") {
			pm := paramRe.FindStringSubmatch(strings.Join(strings.Fields(p), " "))
			if pm == nil {
				continue
			}
			args = append(args, fmt.Sprintf("*(%s*)p[%d]", pm[1], i))
			switch {
			case !strings.Contains(pm[1], "*"):
				access = append(access, '-')
			case strings.HasPrefix(pm[1], "const"):
				access = append(access, 'r')
			default:
				access = append(access, 'w')
			}
		}
		accesses = append(accesses, string(access))
		fmt.Fprintf(&b, "static void emu_w_%s(void** p) { %s(%s); }\n", name, name, strings.Join(args, ", "))
		names = append(names, name)
	}
	b.WriteString("struct emu_entry { const char* name; void (*fn)(void**); bool sync; const char* access; };\nstatic emu_entry emu_table[] = {\n")
	for i, n := range names {
		fmt.Fprintf(&b, "\t{\"%s\", emu_w_%s, %v, \"%s\"},\n", n, n, syncs[i], accesses[i])
	}
	fmt.Fprintf(&b, "};\nstatic const int emu_table_len = %d;\n", len(names))
	return b.String()
}
