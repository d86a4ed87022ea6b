package cuda

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/kernels"
)

// Open loads the kernels from the file $GP_CUDA_PTX names (on the fake driver, which finds a
// kernel by its .entry line): a PTX with every kernel opens and the device says which file it
// loaded; one lacking an entry point is refused before the driver sees it, naming the kernel
// and the file; one the driver cannot load names the file and the driver's error.
func TestOpenLoadsPTXFromEnv(t *testing.T) {
	cudatest.Require(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.ptx", kernels.PTX)
	lacking := write("lacking.ptx", strings.Replace(kernels.PTX, ".entry adam_f32(", ".entry adam_f32_old(", 1))
	broken := write("broken.ptx", strings.Replace(kernels.PTX, ".version", ".versio", 1))
	for _, c := range []struct {
		name, path string
		wantErr    []string
	}{
		{"complete", full, nil},
		{"lacking", lacking, []string{"adam_f32", lacking}},
		{"does not load", broken, []string{broken, "PTX"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(kernels.PTXEnv, c.path)
			d, err := Open(0)
			if c.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if d.KernelsPTX() != c.path {
					t.Errorf("KernelsPTX = %q, want %q", d.KernelsPTX(), c.path)
				}
				for _, k := range kernels.Required() {
					if err := d.Kernel(k); err != nil {
						t.Error(err)
					}
				}
				return
			}
			if err == nil {
				d.Close()
				t.Fatalf("Open with %s=%s succeeded", kernels.PTXEnv, c.path)
			}
			for _, s := range c.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}

// With $GP_REQUIRE_CUDNN=1 a cuDNN that does not load fails Open, naming the library, instead
// of falling back to im2col; without it the device opens on im2col and says why.
func TestRequireCuDNN(t *testing.T) {
	cudatest.Require(t)
	// cudnn.Load runs once per process: this test needs a process whose cuDNN is missing.
	if os.Getenv("GP_TEST_NO_CUDNN") != "1" {
		t.Setenv("GP_TEST_NO_CUDNN", "1")
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		out, err := runSelf(t, exe, "TestRequireCuDNN")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "--- PASS: TestRequireCuDNN") {
			t.Fatalf("the child did not pass:\n%s", out)
		}
		return
	}
	missing := filepath.Join(t.TempDir(), "libcudnn.so.9")
	t.Setenv("CUDNN_LIBRARY", missing)
	t.Setenv("GPU_LIB_DIRS", filepath.Dir(missing))
	t.Setenv(RequireCuDNNEnv, "1")
	if d, err := Open(0); err == nil {
		d.Close()
		t.Fatal("Open with GP_REQUIRE_CUDNN=1 and no cuDNN succeeded")
	} else if !strings.Contains(err.Error(), "libcudnn.so") || !strings.Contains(err.Error(), RequireCuDNNEnv) {
		t.Fatalf("error %q names neither libcudnn.so nor %s", err, RequireCuDNNEnv)
	} else {
		t.Logf("refused: %v", err)
	}
	t.Setenv(RequireCuDNNEnv, "")
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if impl, why := d.ConvImplInUse(); impl != ConvIm2col || why == nil {
		t.Fatalf("ConvImplInUse = %v, %v; want im2col and why", impl, why)
	}
}

// runSelf runs this test binary's test name alone and returns its output.
func runSelf(t *testing.T, exe, name string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "-test.run=^"+name+"$", "-test.v", "-test.count=1").CombinedOutput()
	return string(out), err
}
