//go:build amd64 && !purego

package comm

//go:noescape
func sum2F32(o, x0, x1 *float32, n int)

//go:noescape
func sum3F32(o, x0, x1, x2 *float32, n int)

//go:noescape
func sum4F32(o, x0, x1, x2, x3 *float32, n int)

// sumF32 is sumN for float32 with SSE: the whole multiples of 8 elements in assembly, the
// rest in Go. It returns how many elements it did.
func sumF32(o []float32, x [][]float32) int {
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
