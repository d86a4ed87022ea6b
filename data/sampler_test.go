package data_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/internal/fixture"
)

// TestDistributedSamplerMatchesTorch compares shuffle=False indices with torch 1.13's
// DistributedSampler for every (n, world, drop_last, rank) in the fixture, exactly.
func TestDistributedSamplerMatchesTorch(t *testing.T) {
	fx, err := fixture.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fx.Sampler {
		for rank, want := range c.Indices {
			s, err := data.NewDistributedSampler(c.N, rank, c.World, false, 0, c.DropLast)
			if err != nil {
				t.Fatal(err)
			}
			got := s.Indices(3)
			if !slices.Equal(got, want) || s.Len() != len(want) {
				t.Errorf("n=%d world=%d drop_last=%v rank=%d: got %v (Len %d), torch %v", c.N, c.World, c.DropLast, rank, got, s.Len(), want)
			}
		}
	}
}

// TestDistributedSamplerShuffled checks the structure torch guarantees with shuffle=True: all
// ranks share one permutation per epoch, together they cover every index (padding repeats the
// permutation's start), and set_epoch changes the order.
func TestDistributedSamplerShuffled(t *testing.T) {
	for _, tc := range []struct {
		n, world int
		dropLast bool
	}{{10, 3, false}, {10, 3, true}, {7, 4, false}, {2, 5, false}, {16, 4, false}} {
		t.Run(fmt.Sprintf("n%d_w%d_drop%v", tc.n, tc.world, tc.dropLast), func(t *testing.T) {
			var ranks [][]int
			var total int
			for r := 0; r < tc.world; r++ {
				s, _ := data.NewDistributedSampler(tc.n, r, tc.world, true, 42, tc.dropLast)
				ranks = append(ranks, s.Indices(1))
				total = s.TotalSize
			}
			// Reassemble the padded permutation from the rank stripes.
			perm := make([]int, total)
			for r, idx := range ranks {
				for k, v := range idx {
					perm[k*tc.world+r] = v
				}
			}
			seen := map[int]bool{}
			for _, v := range perm[:min(tc.n, total)] {
				if seen[v] {
					t.Fatalf("index %d twice within the permutation %v", v, perm)
				}
				seen[v] = true
			}
			if !tc.dropLast {
				if len(seen) != tc.n {
					t.Fatalf("covered %d of %d indices", len(seen), tc.n)
				}
				for k := tc.n; k < total; k++ {
					if perm[k] != perm[k%tc.n] {
						t.Fatalf("padding %v does not repeat from the start", perm)
					}
				}
			}
			s0, _ := data.NewDistributedSampler(tc.n, 0, tc.world, true, 42, tc.dropLast)
			if tc.n > 3 && slices.Equal(s0.Indices(1), s0.Indices(2)) && slices.Equal(s0.Indices(2), s0.Indices(3)) {
				t.Error("epochs 1, 2, 3 give the same order")
			}
		})
	}
}

func TestDistributedSamplerErrors(t *testing.T) {
	for _, c := range [][2]int{{2, 2}, {-1, 2}, {0, 0}} {
		if _, err := data.NewDistributedSampler(10, c[0], c[1], false, 0, false); err == nil {
			t.Errorf("rank %d world %d: want an error", c[0], c[1])
		}
	}
}
