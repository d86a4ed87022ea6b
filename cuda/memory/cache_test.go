package memory

import (
	"errors"
	"testing"
)

type fakeBackend struct {
	next, limit, used int
	live              map[uintptr]int
	allocs, frees     int
}

var errOOM = errors.New("out of memory")

func (f *fakeBackend) Alloc(n int) (uintptr, error) {
	if f.used+n > f.limit {
		return 0, errOOM
	}
	f.next += 1 << 30
	f.used += n
	f.allocs++
	f.live[uintptr(f.next)] = n
	return uintptr(f.next), nil
}

func (f *fakeBackend) Free(p uintptr) error {
	n, ok := f.live[p]
	if !ok {
		return errors.New("bad free")
	}
	delete(f.live, p)
	f.used -= n
	f.frees++
	return nil
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1<<20 - 1, 1 << 20}, {1 << 20, 1 << 20},
		{1<<20 + 1, 1<<20 + 1<<18}, {3 << 20, 3 << 20}, {(7 << 20) + 1, 8 << 20},
	} {
		if got := SizeClass(tc.n); got != tc.want {
			t.Errorf("SizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
		if got := SizeClass(tc.n); got < tc.n || (tc.n > 1<<20 && float64(got) > 1.25*float64(tc.n)) {
			t.Errorf("SizeClass(%d) = %d wastes too much", tc.n, got)
		}
	}
}

// A steady loop allocates from the backend only in its first iteration.
func TestReuseAndStats(t *testing.T) {
	fb := &fakeBackend{limit: 1 << 40, live: map[uintptr]int{}}
	c := New(fb, WithName("test"))
	for step := range 3 {
		var bs []Block
		for _, n := range []int{100, 4000, 3 << 20, 100} {
			b, err := c.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			bs = append(bs, b)
		}
		for _, b := range bs {
			if err := c.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if step == 0 && fb.allocs != 4 {
			t.Fatalf("first step: %d backend allocs", fb.allocs)
		}
	}
	st := c.Stats()
	if fb.allocs != 4 || st.Hits != 8 || st.Misses != 4 || st.InUse != 0 || st.PeakInUse != 512+4096+3<<20+512 {
		t.Fatalf("allocs %d, stats %+v", fb.allocs, st)
	}
	kept, err := c.Alloc(4000)
	if err != nil {
		t.Fatal(err)
	}
	c.ResetPeak()
	if st := c.Stats(); st.PeakInUse != 4096 {
		t.Fatalf("after ResetPeak with 4096 bytes in use: peak %d", st.PeakInUse)
	}
	if err := c.Free(kept); err != nil {
		t.Fatal(err)
	}
	if err := c.Free(Block{Ptr: 12345}); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("bad free: %v", err)
	}
	if err := c.Close(); err != nil || len(fb.live) != 0 || c.Stats().Reserved != 0 {
		t.Fatalf("close: %v, %d live", err, len(fb.live))
	}
}

// Out of memory with blocks cached: the cache empties itself and retries.
func TestOOMRetry(t *testing.T) {
	fb := &fakeBackend{limit: 4 << 20, live: map[uintptr]int{}}
	c := New(fb)
	b, err := c.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Free(b)
	b2, err := c.Alloc(2 << 20) // another class: needs the cached 3 MiB released
	if err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Retries != 1 || st.Reserved != 2<<20 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := c.Alloc(3 << 20); !errors.Is(err, errOOM) {
		t.Fatalf("real OOM: %v", err)
	}
	_ = c.Free(b2)
}
