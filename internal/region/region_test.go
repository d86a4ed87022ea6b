package region

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// needMmap skips a test where regions are not memory mappings (region_other.go): file
// regions are refused there, and heap regions hold their memory.
func needMmap(t *testing.T) {
	t.Helper()
	r, err := NewFile("probe", filepath.Join(t.TempDir(), "probe.f32"), 1)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// fill writes i+1 into element i, so that no element reads as zero.
func fill(f []float32) {
	for i := range f {
		f[i] = float32(i + 1)
	}
}

// Every constructor gives n elements that read as zeros.
func TestNewReadsZeros(t *testing.T) {
	const n = 5000
	for _, tc := range []struct {
		name string
		new  func(name string, n int) (*Region, error)
	}{
		{"anon", NewAnon},
		{"placeholder", NewPlaceholder},
		{"zeros", NewZeros},
		{"file", func(name string, n int) (*Region, error) {
			return NewFile(name, filepath.Join(t.TempDir(), "r.f32"), n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.new(tc.name, n)
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			f := r.Floats()
			if len(f) != n {
				t.Fatalf("%d elements, want %d", len(f), n)
			}
			for i, v := range f {
				if v != 0 {
					t.Fatalf("element %d: %g, want 0", i, v)
				}
			}
		})
	}
}

// Release zeros exactly [lo, hi) of an anonymous region, whole pages and partial ones;
// Free keeps everything outside [lo, hi). Ranges start and end inside pages, on page
// boundaries, inside a single page, and cover the region.
func TestReleaseAndFreeRanges(t *testing.T) {
	per := os.Getpagesize() / 4 // elements per page
	n := 4*per + 37
	for _, tc := range []struct {
		name   string
		lo, hi int
	}{
		{"inside one page", 3, 17},
		{"across one boundary", per - 5, per + 9},
		{"whole pages", per, 3 * per},
		{"partial ends, whole pages between", 7, 3*per + 11},
		{"to the end", per + 1, n},
		{"everything", 0, n},
		{"empty", 9, 9},
		{"reversed", 20, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []string{"release", "free"} {
				r, err := NewAnon(tc.name, n)
				if err != nil {
					t.Fatal(err)
				}
				f := r.Floats()
				fill(f)
				if op == "release" {
					err = r.Release(tc.lo, tc.hi)
				} else {
					err = r.Free(tc.lo, tc.hi)
				}
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				for i, v := range f {
					in := i >= tc.lo && i < tc.hi
					switch {
					case in && op == "release" && v != 0:
						t.Fatalf("%s [%d, %d): element %d reads %g, want 0", op, tc.lo, tc.hi, i, v)
					case in && op == "free" && v != 0 && v != float32(i+1):
						t.Fatalf("%s [%d, %d): element %d reads %g, want 0 or %d", op, tc.lo, tc.hi, i, v, i+1)
					case !in && v != float32(i+1):
						t.Fatalf("%s [%d, %d): element %d outside reads %g, want %d", op, tc.lo, tc.hi, i, v, i+1)
					}
				}
				// Freed or released memory is written again without harm.
				fill(f)
				if f[n-1] != float32(n) {
					t.Fatalf("%s: rewrite read %g", op, f[n-1])
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// ReleaseAll zeros an anonymous region and keeps a file region's contents, in memory and
// in the file after Sync and Close.
func TestReleaseAllKeepsFileContents(t *testing.T) {
	needMmap(t)
	n := os.Getpagesize()/4*3 + 5
	path := filepath.Join(t.TempDir(), "state.f32")
	r, err := NewFile("state", path, n)
	if err != nil {
		t.Fatal(err)
	}
	fill(r.Floats())
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := r.ReleaseAll(); err != nil {
		t.Fatal(err)
	}
	r.WillNeed()
	for i, v := range r.Floats() {
		if v != float32(i+1) {
			t.Fatalf("element %d after ReleaseAll: %g, want %d", i, v, i+1)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 4*n {
		t.Fatalf("file holds %d bytes, want at least %d", len(b), 4*n)
	}
	for i := range n {
		if v := math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:])); v != float32(i+1) {
			t.Fatalf("file element %d: %g, want %d", i, v, i+1)
		}
	}

	a, err := NewAnon("anon", n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fill(a.Floats())
	if err := a.ReleaseAll(); err != nil {
		t.Fatal(err)
	}
	for i, v := range a.Floats() {
		if v != 0 {
			t.Fatalf("anonymous element %d after ReleaseAll: %g, want 0", i, v)
		}
	}
}

// A file region cannot be made where files are not mapped: the error says so.
func TestNewFileUnsupported(t *testing.T) {
	_, err := NewFile("state", filepath.Join(t.TempDir(), "state.f32"), 4)
	mapped := runtime.GOOS == "linux" || runtime.GOOS == "darwin" || runtime.GOOS == "dragonfly" ||
		runtime.GOOS == "freebsd" || runtime.GOOS == "netbsd"
	if mapped && err != nil {
		t.Fatalf("NewFile on %s: %v", runtime.GOOS, err)
	}
	if !mapped && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("NewFile on %s: %v, want errors.ErrUnsupported", runtime.GOOS, err)
	}
}

// A missing directory fails NewFile with an error naming the region and wrapping the
// file system's error.
func TestNewFileMissingDirectory(t *testing.T) {
	needMmap(t)
	_, err := NewFile("rank 3 state", filepath.Join(t.TempDir(), "missing", "s.f32"), 4)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want an error wrapping os.ErrNotExist", err)
	}
	if got := err.Error(); len(got) < len("rank 3 state") || got[:len("rank 3 state")] != "rank 3 state" {
		t.Fatalf("error %q does not start with the region's name", got)
	}
}

// A nil region is a no-op everywhere.
func TestNilRegion(t *testing.T) {
	var r *Region
	if r.Floats() != nil || r.Held() != 0 || r.Resident() != 0 {
		t.Fatal("nil region reports memory")
	}
	for _, err := range []error{r.Release(0, 10), r.Free(0, 10), r.ReleaseAll(), r.FreeAll(), r.Sync(), r.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	r.WillNeed()
}
