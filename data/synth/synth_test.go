package synth_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/data/synth"
)

// TestDeterministic: the same seed writes the same bytes; another seed does not.
func TestDeterministic(t *testing.T) {
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []struct {
		dir  string
		seed uint64
	}{{a, 1}, {b, 1}, {c, 2}} {
		if err := synth.WriteSplit(d.dir, 3, 2, 1, 24, d.seed); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"train/class_000/00000.jpg", "train/class_002/00001.jpg", "val/class_001/00000.jpg"} {
		x, _ := os.ReadFile(filepath.Join(a, rel))
		y, _ := os.ReadFile(filepath.Join(b, rel))
		z, _ := os.ReadFile(filepath.Join(c, rel))
		if len(x) == 0 || !bytes.Equal(x, y) || bytes.Equal(x, z) {
			t.Errorf("%s: same seed equal %v, other seed equal %v", rel, bytes.Equal(x, y), bytes.Equal(x, z))
		}
	}
	if err := synth.WriteImageFolder(a, 0, 1, 24, 1); err == nil {
		t.Error("zero classes: want an error")
	}
}
