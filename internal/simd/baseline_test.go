package simd

import (
	"bytes"
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd/sse2"
)

// TestCopyNT checks CopyNT against copy, at every level, for every alignment of both sides and lengths
// around the 128-byte block and the small-copy threshold.
func TestCopyNT(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		src := make([]byte, 1<<16+300)
		rng.Read(src)
		for _, n := range []int{0, 1, 127, 4095, 4096, 4097, 4096 + 127, 4096 + 128, 1 << 16} {
			for da := range 17 {
				for sa := range 3 {
					dst := make([]byte, n+40)
					want := bytes.Clone(dst)
					CopyNT(dst[da:da+n], src[sa:sa+n])
					copy(want[da:da+n], src[sa:sa+n])
					if !bytes.Equal(dst, want) {
						t.Fatalf("n %d dst+%d src+%d: CopyNT differs from copy", n, da, sa)
					}
				}
			}
		}
	})
}

// TestSumF32MatchesScalar: SumF32 adds ((x0+x1)+x2)+x3 lane by lane bit for bit as the
// scalar code, on the elements it reports, for 2 to 4 inputs and an output aliasing an input;
// it does none at level off or for other input counts.
func TestSumF32MatchesScalar(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		rng := rand.New(rand.NewSource(2))
		for k := 1; k <= 5; k++ {
			for _, n := range []int{0, 7, 8, 9, 100} {
				x := make([][]float32, k)
				for p := range x {
					x[p] = make([]float32, n)
					for i := range x[p] {
						x[p][i] = float32(rng.NormFloat64() * float64(int(1)<<rng.Intn(20)))
					}
				}
				o := make([]float32, n)
				done := SumF32(o, x)
				want := 0
				if On() && k >= 2 && k <= 4 && sse2.Asm {
					want = n &^ 7
				}
				if done != want {
					t.Fatalf("k=%d n=%d: did %d elements, want %d", k, n, done, want)
				}
				for i := range done {
					s := x[0][i] + x[1][i]
					for p := 2; p < k; p++ {
						s += x[p][i]
					}
					if math.Float32bits(o[i]) != math.Float32bits(s) {
						t.Fatalf("k=%d n=%d: [%d] = %g, want %g", k, n, i, o[i], s)
					}
				}
			}
		}
	})
}
