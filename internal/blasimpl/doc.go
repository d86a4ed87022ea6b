// Package blasimpl selects the BLAS implementation used by gonum and gorgonia.
//
// With cgo (the default) it links Debian's OpenBLAS (libopenblas-dev) through gonum's
// netlib binding; with CGO_ENABLED=0 (or the purego build tag) it keeps gonum's pure-Go
// BLAS. Import it for its side effect: importing is enough, nothing else is needed.
package blasimpl

// Name reports which BLAS implementation is in use ("openblas" or "gonum").
func Name() string { return name }
