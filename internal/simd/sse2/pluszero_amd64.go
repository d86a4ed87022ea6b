//go:build amd64 && !purego

package sse2

import "unsafe"

//go:noescape
func plusZeroNT128(dst, src *float32, n int)

// PlusZeroNT sets dst[i] = src[i] + 0 (dst at least as long as src), bit for bit the scalar
// additions: a -0 becomes +0 and a signalling NaN is quieted, as adding src into zeros
// does. From 4 KiB up it writes with stores that bypass the cache.
func PlusZeroNT(dst, src []float32) {
	n := len(src)
	if n < 1024 {
		plusZeroGo(dst[:n], src)
		return
	}
	head := int((16-uintptr(unsafe.Pointer(&dst[0]))%16)%16) / 4
	plusZeroGo(dst[:head], src[:head])
	body := (n - head) &^ 31
	plusZeroNT128(&dst[head], &src[head], 4*body)
	plusZeroGo(dst[head+body:n], src[head+body:])
}
