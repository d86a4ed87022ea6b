package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// needMmap skips a test where regions are not memory mappings (region_other.go): file
// regions are refused there, and heap regions hold their memory.
func needMmap(t *testing.T) {
	t.Helper()
	if !Mapped {
		t.Skip("regions are not memory mappings on " + runtime.GOOS)
	}
}

// fill writes i+1 into element i, so that no element reads as zero.
func fill(f []float32) {
	for i := range f {
		f[i] = float32(i + 1)
	}
}

// constructors are the ways to make a region, a file region in a folder of t's.
func constructors(t *testing.T) []struct {
	name string
	new  func(name string, n int) (*Region, error)
} {
	return []struct {
		name string
		new  func(name string, n int) (*Region, error)
	}{
		{"anon", NewAnon},
		{"zeros", NewZeros},
		{"file", func(name string, n int) (*Region, error) {
			return NewFile(name, filepath.Join(t.TempDir(), "r.f32"), n)
		}},
	}
}

// Every constructor gives n elements that read as zeros.
func TestNewReadsZeros(t *testing.T) {
	const n = 5000
	for _, tc := range constructors(t) {
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
// boundaries, inside a single page, and cover the region. A read-only region (zeros) is
// released and freed without being written, and reads as zeros throughout. A range that
// is reversed or outside the region is refused with an error naming the region and the
// range, and changes nothing.
func TestReleaseAndFreeRanges(t *testing.T) {
	per := os.Getpagesize() / 4 // elements per page
	n := 4*per + 37
	for _, tc := range []struct {
		name    string
		lo, hi  int
		zeros   bool // a NewZeros region (read-only) instead of NewAnon
		wantErr bool
	}{
		{"inside one page", 3, 17, false, false},
		{"across one boundary", per - 5, per + 9, false, false},
		{"whole pages", per, 3 * per, false, false},
		{"partial ends, whole pages between", 7, 3*per + 11, false, false},
		{"to the end", per + 1, n, false, false},
		{"everything", 0, n, false, false},
		{"empty", 9, 9, false, false},
		{"zeros, inside one page", 3, 17, true, false},
		{"zeros, partial ends, whole pages between", 7, 3*per + 11, true, false},
		{"zeros, everything", 0, n, true, false},
		{"reversed", 20, 10, false, true},
		{"negative lo", -1, 10, false, true},
		{"hi past the end", per, n + 1, false, true},
		{"zeros, hi past the end", 0, n + 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, op := range []string{"release", "free"} {
				newRegion, want := NewAnon, func(i int) float32 { return float32(i + 1) }
				if tc.zeros {
					newRegion, want = NewZeros, func(int) float32 { return 0 }
				}
				r, err := newRegion(tc.name, n)
				if err != nil {
					t.Fatal(err)
				}
				f := r.Floats()
				if !tc.zeros {
					fill(f)
				}
				if op == "release" {
					err = r.Release(tc.lo, tc.hi)
				} else {
					err = r.Free(tc.lo, tc.hi)
				}
				switch {
				case tc.wantErr && err == nil:
					t.Fatalf("%s [%d, %d): no error", op, tc.lo, tc.hi)
				case tc.wantErr:
					for _, part := range []string{r.String(), fmt.Sprintf("[%d, %d)", tc.lo, tc.hi)} {
						if !strings.Contains(err.Error(), part) {
							t.Fatalf("%s [%d, %d): error %q does not name %q", op, tc.lo, tc.hi, err, part)
						}
					}
				case err != nil:
					t.Fatalf("%s: %v", op, err)
				}
				for i, v := range f {
					in := !tc.wantErr && i >= tc.lo && i < tc.hi
					switch {
					case in && op == "release" && v != 0:
						t.Fatalf("%s [%d, %d): element %d reads %g, want 0", op, tc.lo, tc.hi, i, v)
					case in && op == "free" && v != 0 && v != want(i):
						t.Fatalf("%s [%d, %d): element %d reads %g, want 0 or %g", op, tc.lo, tc.hi, i, v, want(i))
					case !in && v != want(i):
						t.Fatalf("%s [%d, %d): element %d outside reads %g, want %g", op, tc.lo, tc.hi, i, v, want(i))
					}
				}
				if !tc.zeros {
					// Freed or released memory is written again without harm.
					fill(f)
					if f[n-1] != float32(n) {
						t.Fatalf("%s: rewrite read %g", op, f[n-1])
					}
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// After Close every method is a no-op, as on a nil region, whatever its range: Floats is
// nil, Held and Resident 0, the others return nil, and a second Close does nothing.
func TestClosedRegion(t *testing.T) {
	for _, tc := range constructors(t) {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.new(tc.name, 1000)
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if r.Floats() != nil || r.Held() != 0 || r.Resident() != 0 {
				t.Fatal("closed region reports memory")
			}
			for i, err := range []error{r.Release(0, 2000), r.Free(0, 2000), r.Release(-1, 5), r.ReleaseAll(), r.FreeAll(), r.Sync(), r.Close()} {
				if err != nil {
					t.Fatalf("call %d on a closed region: %v", i, err)
				}
			}
			r.WillNeed()
		})
	}
}

// String names a region in its errors: its name and its size in bytes (whole pages), or
// its name and its file.
func TestString(t *testing.T) {
	pg := os.Getpagesize()
	a, err := NewAnon("rank 1 gather", pg/4+1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got, want := a.String(), fmt.Sprintf("rank 1 gather (%d bytes)", 2*pg); got != want {
		t.Errorf("anonymous region: %q, want %q", got, want)
	}
	if got, want := (*Region)(nil).String(), "nil region"; got != want {
		t.Errorf("nil region: %q, want %q", got, want)
	}
	needMmap(t)
	path := filepath.Join(t.TempDir(), "state.f32")
	f, err := NewFile("rank 1 state", path, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := f.String(), "rank 1 state ("+path+")"; got != want {
		t.Errorf("file region: %q, want %q", got, want)
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
	if Mapped && err != nil {
		t.Fatalf("NewFile on %s: %v", runtime.GOOS, err)
	}
	if !Mapped && !errors.Is(err, errors.ErrUnsupported) {
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
