package region

import (
	"os"
	"syscall"
	"testing"
)

// On Linux, memory written into an anonymous region is resident and held; ReleaseAll gives
// every page back (Resident and Held 0), and FreeAll leaves the pages mapped but the
// kernel's to take (Held 0). DropPages does the same to memory that is not a region.
func TestResidentAndHeld(t *testing.T) {
	// Enough pages that Held's allowance for the kernel's per-CPU batching cannot hide them.
	n := int(2*lazyFreeBatch)/4 + 64*os.Getpagesize()/4
	for _, tc := range []struct {
		name         string
		give         func(r *Region) error
		wantResident bool // pages still counted by Resident afterwards
	}{
		{"ReleaseAll", (*Region).ReleaseAll, false},
		{"Release", func(r *Region) error { return r.Release(0, len(r.Floats())) }, false},
		{"FreeAll", (*Region).FreeAll, true},
		{"DropPages", func(r *Region) error { DropPages(r.Floats()); return nil }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewAnon(tc.name, n)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := r.Resident(); got != 0 {
				t.Fatalf("fresh region: %d B resident, want 0", got)
			}
			fill(r.Floats())
			if got, want := r.Resident(), int64(4*n); got < want {
				t.Fatalf("written region: %d B resident, want at least %d", got, want)
			}
			if got := r.Held(); got <= 0 {
				t.Fatalf("written region: %d B held, want > 0", got)
			}
			if err := tc.give(r); err != nil {
				t.Fatal(err)
			}
			if got := r.Held(); got != 0 {
				t.Errorf("after %s: %d B held, want 0", tc.name, got)
			}
			if got := r.Resident(); !tc.wantResident && got != 0 {
				t.Errorf("after %s: %d B resident, want 0", tc.name, got)
			}
		})
	}
}

// Where mincore fails, Resident is unknown and reports 0 (never a negative count that
// would corrupt a caller's total), and so does Held where it falls back to Resident.
func TestResidentWhenMincoreFails(t *testing.T) {
	r, err := NewAnon("probe", 4*os.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fill(r.Floats())
	saved := mincore
	mincore = func(b, vec []byte) error { return syscall.ENOMEM }
	defer func() { mincore = saved }()
	if got := r.Resident(); got != 0 {
		t.Fatalf("Resident with mincore failing: %d, want 0", got)
	}
}
