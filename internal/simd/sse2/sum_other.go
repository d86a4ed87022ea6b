//go:build !amd64 || purego

package sse2

// SumF32 has no vector version here: it does no element (the caller adds them all).
func SumF32(o []float32, x [][]float32) int { return 0 }

// Asm reports that this build has the assembly: not off amd64 or with the purego tag.
const Asm = false
