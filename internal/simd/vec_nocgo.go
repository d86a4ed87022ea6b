//go:build !cgo || !amd64 || purego

package simd

// Without the C kernels On is always false and these are never reached; they run the Go
// loops so that they are right all the same.

func addTo(dst, src []float32) { addToGo(dst, src) }

func sgdMomentum(w, g, mom []float32, lr, mu float32) { sgdMomentumGo(w, g, mom, lr, mu) }

func scale(x []float32, s float32) { scaleGo(x, s) }

func div(x []float32, d float32) { divGo(x, d) }
