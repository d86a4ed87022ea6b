//go:build amd64 && !purego

package comm

import "unsafe"

//go:noescape
func copyNT128(dst, src *byte, n int)

// copyNT copies src to dst (equal lengths) with stores that bypass the cache: for results
// written into a buffer much larger than the cache, which nothing reads again soon, it
// saves the read of every destination line a normal store makes first. Go's copy does the
// same from 1 MiB up; the staged all-reduce writes its result in smaller pieces.
func copyNT(dst, src []byte) {
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
