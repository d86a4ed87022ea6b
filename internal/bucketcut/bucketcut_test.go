package bucketcut

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Six gradients of 16 bytes each (four float32s), position 0 first in the buffer.
var six = []int{16, 16, 16, 16, 16, 16}

func TestCuts(t *testing.T) {
	if got := BySize(six, 16, 32, 0); fmt.Sprint(got) != "[1 3 5]" {
		t.Errorf("BySize = %v, want [1 3 5]", got)
	}
	// Position 1 arrives after 2 and 3: the cut after position 2 moves to 4 (the closure point).
	if got := ByArrival(six, []int{0, 2, 3, 1, 4, 5}, 16, 32, 0); fmt.Sprint(got) != "[1 4]" {
		t.Errorf("ByArrival = %v, want [1 4]", got)
	}
	if got := ByArrival(six, []int{0, 1, 2, 3, 4, 5}, 16, 32, 0); fmt.Sprint(got) != "[1 3 5]" {
		t.Errorf("in-order ByArrival = %v, want [1 3 5]", got)
	}
	// A small last bucket (DDP's LastBucketBytes): the tail of backward gets a bucket of its own.
	for _, c := range []struct {
		name    string
		arrived []int // nil: BySize
		last    int
		want    string
	}{
		{"size, last 16", nil, 16, "[1 5]"},
		{"size, last 32", nil, 32, "[1 4]"},
		{"size, last 0 (PyTorch)", nil, 0, "[1]"},
		{"in order, last 16", []int{0, 1, 2, 3, 4, 5}, 16, "[1 5]"},
		// Position 5 arrives before 4: no closure point after 16 bytes, the cut waits for 4.
		{"swapped tail", []int{0, 1, 2, 3, 5, 4}, 16, "[1 4]"},
		// The tail is already small: no cut is added inside it.
		{"small last bucket already", []int{0, 1, 2, 3, 4, 5}, 96, "[1]"},
	} {
		var got []int
		if c.arrived == nil {
			got = BySize(six, 16, 96, c.last)
		} else {
			got = ByArrival(six, c.arrived, 16, 96, c.last)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: cuts = %v, want %s", c.name, got, c.want)
		}
	}
}

// What ByArrival does with an arrival list that is not a permutation: a repeated position
// counts at its first arrival, one out of range is ignored, and positions never seen arrive
// last in buffer order. Each list below is read as 0, 2, 3, 1, 4, 5.
func TestByArrivalImperfectList(t *testing.T) {
	for _, c := range []struct {
		name    string
		arrived []int
	}{
		{"permutation", []int{0, 2, 3, 1, 4, 5}},
		{"repeats", []int{0, 2, 0, 3, 2, 1, 4, 5, 5}},
		{"out of range", []int{-1, 0, 2, 6, 3, 1, 99, 4, 5}},
		{"never seen", []int{0, 2, 3}},
	} {
		if got := ByArrival(six, c.arrived, 16, 32, 0); fmt.Sprint(got) != "[1 4]" {
			t.Errorf("%s: ByArrival = %v, want [1 4]", c.name, got)
		}
	}
}

// Over random sizes, limits and arrival orders, the cuts are strictly increasing and fall
// strictly inside the buffer (no empty bucket), as the package doc says.
func TestCutsAreValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		n := rng.IntN(12)
		sizes := make([]int, n)
		for j := range sizes {
			sizes[j] = 4 * (1 + rng.IntN(64))
		}
		first, capBytes, last := 4*rng.IntN(100), 4*rng.IntN(200), 4*rng.IntN(80)
		arrived := rng.Perm(n)
		for _, cuts := range [][]int{BySize(sizes, first, capBytes, last), ByArrival(sizes, arrived, first, capBytes, last)} {
			for k, c := range cuts {
				if c <= 0 || c >= n || (k > 0 && c <= cuts[k-1]) {
					t.Fatalf("case %d: sizes %v, first %d, cap %d, last %d, arrived %v: cuts %v", i, sizes, first, capBytes, last, arrived, cuts)
				}
			}
		}
	}
}
