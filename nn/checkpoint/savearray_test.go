package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// SaveArray writes a .npy that reads back with its shape and values, 0-d included.
func TestSaveArray(t *testing.T) {
	dir := t.TempDir()
	for _, e := range []nn.StateEntry{
		{Shape: []int{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}},
		{Shape: []int{}, F32: []float32{7}},
	} {
		path := filepath.Join(dir, "a.npy")
		if err := SaveArray(path, e); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[:6]) != "\x93NUMPY" || (len(b)-4*len(e.F32))%64 != 0 {
			t.Fatalf("not an aligned .npy file: %q", b[:16])
		}
	}
	if err := SaveArray(filepath.Join(dir, "b.npy"), nn.StateEntry{Shape: []int{3}, F32: []float32{1}}); err == nil {
		t.Fatal("a shape that does not fit the data must be an error")
	}
}
