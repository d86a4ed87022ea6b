// Package sse2 holds the Go-assembly kernels of package simd (a package that uses cgo
// cannot hold Go assembly): the fused float32 sums of the collectives and a cache-bypassing
// copy, in SSE2, which every amd64 CPU has. Callers use them through package simd, which
// runs them only while its level is not off.
package sse2
