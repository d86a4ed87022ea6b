package dl

import (
	"os"
	"path/filepath"
	"slices"
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

func TestOpenMissing(t *testing.T) {
	_, err := Open([]string{"/nonexistent/libnothing.so.1"})
	if err == nil {
		t.Fatal("Open of a missing library succeeded")
	}
	if !Available && err != ErrNoCgo {
		t.Fatalf("without cgo: %v, want ErrNoCgo", err)
	}
}
