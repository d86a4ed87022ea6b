package zero

import (
	"errors"
	"path/filepath"
	"testing"
)

// needMmap skips a test where regions are not memory mappings (region_other.go): disk
// offload is refused there, and heap regions hold their memory between steps.
func needMmap(t *testing.T) {
	t.Helper()
	r, err := newFile("probe", filepath.Join(t.TempDir(), "probe.f32"), 1)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
}
