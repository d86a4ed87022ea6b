package comm

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestCopyNT checks copyNT against copy for every alignment of both sides and lengths
// around the 128-byte block and the small-copy threshold.
func TestCopyNT(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	src := make([]byte, 1<<16+300)
	rng.Read(src)
	for _, n := range []int{0, 1, 127, 4095, 4096, 4097, 4096 + 127, 4096 + 128, 1 << 16} {
		for da := range 17 {
			for sa := range 3 {
				dst := make([]byte, n+40)
				want := bytes.Clone(dst)
				copyNT(dst[da:da+n], src[sa:sa+n])
				copy(want[da:da+n], src[sa:sa+n])
				if !bytes.Equal(dst, want) {
					t.Fatalf("n %d dst+%d src+%d: copyNT differs from copy", n, da, sa)
				}
			}
		}
	}
}
