// Package threads sets the number of threads of the BLAS behind internal/blasimpl (OpenBLAS
// with cgo), without blasimpl's side effect of registering that BLAS with gonum and gorgonia.
// Ops that split their own work across goroutines use it to keep each GEMM on its caller's
// thread.
package threads
