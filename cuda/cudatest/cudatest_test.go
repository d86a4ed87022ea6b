package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The fakes and the emulator compile wherever a C and a C++ compiler are found: a source
// that stopped compiling would otherwise only make every device test skip.
func TestBuildFakesAndEmulator(t *testing.T) {
	for _, c := range []struct {
		compiler string
		build    func(dir string) error
		want     []string
	}{
		{"cc", func(dir string) error { _, _, err := Build(dir); return err },
			[]string{"libcuda.so.1", "libnccl.so.2", "libcublas.so.12", "libcudnn.so.9"}},
		{"c++", func(dir string) error { _, err := BuildEmulator(dir); return err }, []string{"libkernels_emu.so"}},
	} {
		t.Run(c.compiler, func(t *testing.T) {
			if _, err := exec.LookPath(c.compiler); err != nil {
				t.Skipf("no %s: %v", c.compiler, err)
			}
			dir := t.TempDir()
			if err := c.build(dir); err != nil {
				t.Fatal(err)
			}
			for _, f := range c.want {
				if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
					t.Errorf("%s not built: %v", f, err)
				}
			}
		})
	}
}
