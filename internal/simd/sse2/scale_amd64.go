//go:build amd64 && !purego

package sse2

//go:noescape
func scale8F32(x *float32, n int, s float32)

// ScaleF32 multiplies the whole multiples of 8 elements of x by s, bit for bit as Go does,
// without a cgo call (comm's goroutines call it: a cgo call may hand their P to another
// goroutine); it returns how many elements it did.
func ScaleF32(x []float32, s float32) int {
	n := len(x) &^ 7
	if n > 0 {
		scale8F32(&x[0], n, s)
	}
	return n
}
