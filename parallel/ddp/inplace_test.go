package ddp

import (
	"strings"
	"testing"
)

// TestInPlaceAvgSameBits: at world 2, shared gradients, whose buckets are all-reduced in place
// with comm.Avg (Note [Division in place]), train to the same bits as ordinary gradients,
// divided by the world size before a Sum: halving is exact, so (g0+g1)/2 == g0/2+g1/2.
func TestInPlaceAvgSameBits(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	var sums []string
	for _, shared := range []string{"0", "1"} {
		outs, errs := spawn(t, 2, "equiv", "GP_DDP_BN=0", "GP_DDP_SHARED="+shared)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("shared=%s: rank %d: %v\n%s", shared, r, err, outs[r])
			}
		}
		if !strings.HasPrefix(outs[0], "checksum") || outs[1] != outs[0] {
			t.Fatalf("shared=%s: ranks differ: %q", shared, outs)
		}
		sums = append(sums, outs[0])
	}
	if sums[0] != sums[1] {
		t.Fatalf("shared gradients (in-place Avg) and ordinary ones (divide, then Sum) differ:\n%s\n%s", sums[0], sums[1])
	}
}
