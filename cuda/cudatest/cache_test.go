package cudatest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

// Cached builds the fake libraries once into the user's cache directory and hands the same
// files to every later call; a folder missing a library is never handed out, and another
// compiler is another folder.
func TestCachedBuildsOnce(t *testing.T) {
	if !cudatest.Cgo {
		t.Skip("built without cgo")
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache) // where XDG_CACHE_HOME is not read (macOS)
	first, temp, err := cudatest.Cached(false)
	if err != nil {
		t.Skip(err) // no C compiler
	}
	if temp != "" {
		t.Fatalf("built into the temporary folder %s, want the cache under %s", temp, cache)
	}
	if !strings.HasPrefix(first.Cuda, cache) {
		t.Fatalf("libcuda at %s, want it under %s", first.Cuda, cache)
	}
	for _, p := range []string{first.Cuda, first.NCCL, first.Cublas, first.Cudnn} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if first.Emulator != "" {
		t.Fatalf("emulator %s built though not asked for", first.Emulator)
	}
	stamp := func(p string) time.Time {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	built := stamp(first.NCCL)

	again, _, err := cudatest.Cached(false)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || !stamp(again.NCCL).Equal(built) {
		t.Fatalf("second call %+v (libnccl modified %v), want %+v untouched (%v)", again, stamp(again.NCCL), first, built)
	}

	// A folder that lost a library is not handed out: the build serves from a temporary
	// folder, and the cache folder is left alone (a process may be loading from it).
	if err := os.Remove(first.Cudnn); err != nil {
		t.Fatal(err)
	}
	rebuilt, temp, err := cudatest.Cached(false)
	if err != nil {
		t.Fatal(err)
	}
	if temp == "" || !strings.HasPrefix(rebuilt.Cudnn, temp) {
		t.Fatalf("after removing libcudnn: served %s from %q, want a temporary folder", rebuilt.Cudnn, temp)
	}
	if _, err := os.Stat(rebuilt.Cudnn); err != nil {
		t.Fatalf("after removing libcudnn: %v", err)
	}
	if _, err := os.Stat(first.NCCL); err != nil {
		t.Fatalf("the cache folder was touched: %v", err)
	}
	os.RemoveAll(temp)

	// Another compiler (a link to the same one, by another path) is another folder.
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	path, err := exec.LookPath(cc)
	if err != nil {
		t.Skip(err)
	}
	link := filepath.Join(t.TempDir(), "cc")
	if err := os.WriteFile(link, []byte("#!/bin/sh\nexec "+path+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CC", link)
	other, _, err := cudatest.Cached(false)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(other.Cuda) == filepath.Dir(first.Cuda) {
		t.Fatalf("compiler %s shares the folder %s of %s", link, filepath.Dir(other.Cuda), path)
	}
}
