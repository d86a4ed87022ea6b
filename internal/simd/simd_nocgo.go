//go:build !cgo || !amd64 || purego

package simd

// enabled is false without cgo: the Go loops run. A variable, as with cgo, for the tests.
var enabled = false

func addTo(dst, src []float32) { addToGo(dst, src) }

func sgdMomentum(w, g, mom []float32, lr, mu float32) { sgdMomentumGo(w, g, mom, lr, mu) }
