//go:build !cgo || !amd64 || purego

package simd

// kernelsBuilt: without cgo on amd64 (or with the purego tag) there are no C kernels and
// the only level is Off.
const kernelsBuilt = false
