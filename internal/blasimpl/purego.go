//go:build !cgo || purego

package blasimpl

const name = "gonum"

// Threads reports the number of threads the BLAS uses; gonum's pure-Go BLAS runs GEMM on
// several goroutines, so this reports 0 (not fixed).
func Threads() int { return 0 }

// Core reports the BLAS's kernels: gonum's own Go (and assembly) kernels.
func Core() string { return "gonum" }

// Narrow reports whether the BLAS's float32 GEMM runs kernels narrower than the CPU's
// AVX-512 units: false, as the project's own AVX-512 kernels need cgo too.
func Narrow() bool { return false }
