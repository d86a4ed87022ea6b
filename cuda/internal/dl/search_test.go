package dl

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCandidatesOrderAndWheels(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(site, "libnccl.so.2")
	if err := os.WriteFile(wheel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIRTUAL_ENV", root)
	t.Setenv("GPU_LIB_DIRS", "/a:/b")
	t.Setenv("MY_LIB", "/x/libnccl.so.2")
	got := Candidates("MY_LIB", "libnccl.so.2")
	want := []string{"/x/libnccl.so.2", "/a/libnccl.so.2", "/b/libnccl.so.2", "libnccl.so.2", wheel}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("Candidates = %q, want prefix %q", got, want)
	}
}

// A library that is nowhere: the error names it and every folder searched, and says that
// a bare soname was looked up through LD_LIBRARY_PATH and the linker's cache.
func TestOpenMissing(t *testing.T) {
	t.Setenv("LD_LIBRARY_PATH", "/wheels/nvidia/cudnn/lib")
	_, err := Open([]string{"/nonexistent/libnothing.so.1", "/other/dir/libnothing.so.1", "libnothing.so.1"})
	if err == nil {
		t.Fatal("Open of a missing library succeeded")
	}
	if !Available {
		if err != ErrNoCgo {
			t.Fatalf("without cgo: %v, want ErrNoCgo", err)
		}
		return
	}
	for _, s := range []string{"libnothing.so.1", "folders searched: /nonexistent, /other/dir", "LD_LIBRARY_PATH=/wheels/nvidia/cudnn/lib"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}
