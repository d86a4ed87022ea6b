//go:build !cgo || !amd64 || purego

package simd

func scale(x []float32, s float32) { scaleGo(x, s) }

func div(x []float32, d float32) { divGo(x, d) }
