package sse2

// zero is a variable, not a constant, so that the compiler keeps the additions.
var zero float32

// plusZeroGo sets dst[i] = src[i] + 0 (equal lengths).
func plusZeroGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = v + zero
	}
}
