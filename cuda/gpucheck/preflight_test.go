package gpucheck

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cublas"
	"github.com/gorgonia-parallel/gp/cuda/cudnn"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/cuda/libnccl"
)

// TestPreflight is run.sh's first Go step: every library the checks use loads, and it logs
// each one's resolved file and version, the device, its compute capability, where the
// kernels' PTX came from and the convolution in use. Under REQUIRE_GPU=1 a library that does
// not load fails it (naming the library and the folders searched), and so does cuDNN that
// does not load (GP_REQUIRE_CUDNN=1 makes the device itself refuse to open then).
func TestPreflight(t *testing.T) {
	d := device(t)
	dev, err := driver.GetDevice(d.Ordinal())
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	dv, err := driver.DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device %d: %s, compute capability %d.%d", d.Ordinal(), d.Name(), major, minor)
	t.Logf("kernels' PTX: %s", d.KernelsPTX())
	t.Logf("libcuda: %s (driver API %d)", resolved(driver.LibraryPath()), dv)

	var bv int
	err = func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.Context().MakeCurrent(); err != nil {
			return err
		}
		h, err := cublas.Create()
		if err != nil {
			return err
		}
		defer h.Destroy()
		bv, err = h.Version()
		return err
	}()
	need(t, "cuBLAS", err)
	t.Logf("cuBLAS: %s (version %d)", resolved(cublas.LibraryPath()), bv)

	need(t, "loading cuDNN", cudnn.Load())
	t.Logf("cuDNN: %s (version %d)", resolved(cudnn.LibraryPath()), cudnn.Version())
	impl, why := d.ConvImplInUse()
	if os.Getenv("REQUIRE_GPU") == "1" && why != nil {
		t.Fatalf("convolution falls back to %v: %v", impl, why)
	}
	t.Logf("convolution: %v", impl)

	need(t, "loading NCCL", libnccl.Load())
	nv, err := libnccl.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL: %s (version %d)", resolved(libnccl.LibraryPath()), nv)
	t.Logf("LD_LIBRARY_PATH=%s", os.Getenv("LD_LIBRARY_PATH"))
	t.Logf("GPU_LIB_DIRS=%s", os.Getenv("GPU_LIB_DIRS"))
}

// resolved is the file the dynamic linker mapped for lib (a path, or a bare soname that
// LD_LIBRARY_PATH or the cache resolved), from /proc/self/maps; lib itself where that is not
// readable.
func resolved(lib string) string {
	if lib == "" {
		return "(not loaded)"
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return lib
	}
	base := lib[strings.LastIndex(lib, "/")+1:]
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		p := f[len(f)-1]
		if strings.HasSuffix(p, "/"+base) {
			if p == lib {
				return p
			}
			return p + " (opened as " + lib + ")"
		}
	}
	return lib
}
