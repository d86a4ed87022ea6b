//go:build !amd64 || purego

package comm

// copyNT copies src to dst (equal lengths); only amd64 has a cache-bypassing version.
func copyNT(dst, src []byte) { copy(dst, src) }
