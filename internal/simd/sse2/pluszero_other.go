//go:build !amd64 || purego

package sse2

// PlusZeroNT sets dst[i] = src[i] + 0 (dst at least as long as src); only amd64 has a
// cache-bypassing version.
func PlusZeroNT(dst, src []float32) { plusZeroGo(dst[:len(src)], src) }
