//go:build !amd64 || purego

package sse2

// CopyNT copies src to dst (equal lengths); only amd64 has a cache-bypassing version.
func CopyNT(dst, src []byte) { copy(dst, src) }
