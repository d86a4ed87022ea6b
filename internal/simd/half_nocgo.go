//go:build !cgo || !amd64 || purego

package simd

// Without the C kernels On is always false and these are never reached; they convert
// nothing and leave the whole slice to the Go loop.

func f32ToBF16Kernel(dst []uint16, src []float32) int { return 0 }
func bf16ToF32Kernel(dst []float32, src []uint16) int { return 0 }
func f32ToF16Kernel(dst []uint16, src []float32) int  { return 0 }
func f16ToF32Kernel(dst []float32, src []uint16) int  { return 0 }
