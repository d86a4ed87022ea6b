package comm

import (
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// TestSumNMatchesScalar checks reduceN's fused sums (SSE for float32 on amd64) against the
// pairwise scalar reduction in rank order, bit for bit, on random floats of mixed
// magnitudes (where the order of additions shows), for 2 to 5 inputs, lengths around the
// vector width, and an output aliasing one input.
func TestSumNMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for k := 2; k <= 5; k++ {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 1000, 4099} {
			for alias := -1; alias < k; alias++ {
				ins := make([][]byte, k)
				for p := range ins {
					x := make([]float32, n)
					for i := range x {
						x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(8)-4)))
					}
					ins[p] = f32bytes(x)
				}
				want := make([]byte, 4*n)
				reduceInto(Float32, Sum, want, ins[0], ins[1])
				for p := 2; p < k; p++ {
					reduceInto(Float32, Sum, want, want, ins[p])
				}
				out := make([]byte, 4*n)
				if alias >= 0 {
					out = ins[alias]
				}
				reduceN(Float32, Sum, out, ins, make([]byte, 4096))
				for i := 0; i < 4*n; i += 4 {
					if *(*uint32)(unsafe.Pointer(&out[i])) != *(*uint32)(unsafe.Pointer(&want[i])) {
						t.Fatalf("k %d n %d alias %d: element %d differs from the scalar sum", k, n, alias, i/4)
					}
				}
			}
		}
	}
}

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
