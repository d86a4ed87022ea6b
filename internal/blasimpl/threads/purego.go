//go:build !cgo || purego

package threads

// Set does nothing without cgo: gonum's pure-Go BLAS has no thread setting (each GEMM splits
// itself across GOMAXPROCS goroutines). It returns 0.
func Set(n int) (prev int) { return 0 }
