//go:build amd64 && !purego

package sse2

//go:noescape
func sum2F32(o, x0, x1 *float32, n int)

//go:noescape
func sum3F32(o, x0, x1, x2 *float32, n int)

//go:noescape
func sum4F32(o, x0, x1, x2, x3 *float32, n int)

// SumF32 is simd.SumF32 without the level check: the whole multiples of 8 elements of o,
// for 2 to 4 inputs; it returns how many elements it did.
func SumF32(o []float32, x [][]float32) int {
	n := len(o) &^ 7
	if n == 0 {
		return 0
	}
	switch len(x) {
	case 2:
		sum2F32(&o[0], &x[0][0], &x[1][0], n)
	case 3:
		sum3F32(&o[0], &x[0][0], &x[1][0], &x[2][0], n)
	case 4:
		sum4F32(&o[0], &x[0][0], &x[1][0], &x[2][0], &x[3][0], n)
	default:
		return 0
	}
	return n
}

// Asm reports that this build has the assembly (amd64, no purego tag).
const Asm = true
