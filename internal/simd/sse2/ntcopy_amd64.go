//go:build amd64 && !purego

package sse2

import "unsafe"

//go:noescape
func copyNT128(dst, src *byte, n int)

// CopyNT is simd.CopyNT without the level check. Go's copy bypasses the cache from 1 MiB
// up; the staged all-reduce writes its results in smaller pieces.
func CopyNT(dst, src []byte) {
	n := len(src)
	if n < 4096 {
		copy(dst, src)
		return
	}
	head := int((16 - uintptr(unsafe.Pointer(&dst[0]))%16) % 16)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 127
	copyNT128(&dst[head], &src[head], body)
	copy(dst[head+body:n], src[head+body:n])
}
