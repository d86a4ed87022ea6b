//go:build !cgo || !amd64 || purego

package simd

// Without the C kernels the level is always Off: every kernel reports false and its caller
// runs the Go code.

// SmallGemmMax bounds SmallGemm32's products, as in builds with the kernels.
const SmallGemmMax = 1 << 18

// GELUFwd is the C kernel's stand-in: it reports false.
func GELUFwd(x, y []float32) bool { return false }

// GELUBwd is the C kernel's stand-in: it reports false.
func GELUBwd(x, dy, dx []float32) bool { return false }

// Im2col is the C kernel's stand-in: it reports false.
func Im2col(g *ConvGeom, x, col []float32, ld, lo, hi int) bool { return false }

// Col2im is the C kernel's stand-in: it reports false.
func Col2im(g *ConvGeom, col, dx []float32, ld, lo, hi int) bool { return false }

// Im2colGather is the C kernel's stand-in: it reports false.
func Im2colGather(g *ConvGeom, gat, padPos, padOff []int32, x, col []float32, ld, lo, hi int) bool {
	return false
}

// Im2colShift is the C kernel's stand-in: it reports false.
func Im2colShift(g *ConvGeom, shift []int32, mask []uint16, x, col []float32, ld, lo, hi int) bool {
	return false
}

// Col2imShift is the C kernel's stand-in: it reports false.
func Col2imShift(g *ConvGeom, shift []int32, mask []uint16, col, dx []float32, ld, lo, hi int) bool {
	return false
}

// Col2imIndexedAdd is the C kernel's stand-in: it reports false.
func Col2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) bool { return false }

// ColSums is the C kernel's stand-in: it reports false.
func ColSums(dy []float32, rows, c int, db []float32) bool { return false }

// MaxPoolSearch is the C kernel's stand-in: it reports false.
func MaxPoolSearch(g *ConvGeom, x, y []float32, arg []int32, lo, hi int) bool { return false }

// MaxPoolScatter is the C kernel's stand-in: it reports false.
func MaxPoolScatter(arg []int32, dy, dx []float32, lo, hi, P, hw int) bool { return false }

// BNSums is the C kernel's stand-in: it reports false.
func BNSums(x []float32, n, c, hw, lo, hi int, sum, sq []float64) bool { return false }

// BNGradSums is the C kernel's stand-in: it reports false.
func BNGradSums(x, dy, sel []float32, n, c, hw, lo, hi int, mean, sdy, sdyx []float64) bool {
	return false
}

// BNApply is the C kernel's stand-in: it reports false.
func BNApply(x, y []float32, c, hw, lo, hi int, mean, istd, gamma, beta []float64, relu bool) bool {
	return false
}

// BNGradApply is the C kernel's stand-in: it reports false.
func BNGradApply(x, dy, sel, dx []float32, c, hw, lo, hi int, k1, k2, k3 []float64) bool {
	return false
}

// ReLUSel is the C kernel's stand-in: it reports false.
func ReLUSel(v, y, sel []float32) bool { return false }

// ScaleTo is the C kernel's stand-in: it reports false.
func ScaleTo(x, y []float32, s float32) bool { return false }

// LNForward is the C kernel's stand-in: it reports false.
func LNForward(x, y []float32, lo, hi, m int, gamma, beta []float64, eps float64, mean, istd []float64) bool {
	return false
}

// LNBackward is the C kernel's stand-in: it reports false.
func LNBackward(x, dy, dx []float32, r0, r1, m int, gamma, mean, istd, dgamma, dbeta []float64) bool {
	return false
}

// SmallGemm32 is the C kernel's stand-in: it reports false.
func SmallGemm32(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	return false
}

// SoftmaxRows32 is the C kernel's stand-in: it reports false.
func SoftmaxRows32(s []float32, bias []float64, mask []float32, n int) bool { return false }

// SoftmaxBwd is the C kernel's stand-in: it reports false.
func SoftmaxBwd(p, d []float32, acc []float64, n int) bool { return false }

// ConvShiftFwd is the C kernel's stand-in: it reports false.
func ConvShiftFwd(s *ConvShift, x, wp, bias, y []float32, n, u0, u1 int) bool { return false }

// ConvShiftUnits is how many units ConvShiftFwd cuts n images of s into: n·ceil(P/16).
func ConvShiftUnits(s *ConvShift, n int) int { return n * ((s.P + 15) / 16) }

// ConvShiftWGrad is the C kernel's stand-in: it reports false.
func ConvShiftWGrad(s *ConvShift, x, dy, dw []float32, n, oa, ob int) bool { return false }

// ConvShiftPadOK reports whether ConvShiftWGradPad runs: never without the C kernels.
func ConvShiftPadOK(s *ConvShift, pad *ConvPad) bool { return false }

// PadPlanes is the C kernel's stand-in: it reports false.
func PadPlanes(pad *ConvPad, x, xp []float32, nc int) bool { return false }

// ConvShiftFwdPad is the C kernel's stand-in: it reports false.
func ConvShiftFwdPad(s *ConvShift, pad *ConvPad, xp, wp, bias, y []float32, n, u0, u1 int) bool {
	return false
}

// ConvShiftWGradPad is the C kernel's stand-in: it reports false.
func ConvShiftWGradPad(s *ConvShift, pad *ConvPad, xp, dy, dw []float32, n, oa, ob int) bool {
	return false
}

// PhaseSplit is the C kernel's stand-in: it reports false.
func PhaseSplit(x, xp []float32, nc, h, w, oh, ow, s int, used uint64) bool { return false }

// PhaseMerge is the C kernel's stand-in: it reports false.
func PhaseMerge(xp, dx []float32, nc, h, w, oh, ow, s int, used uint64) bool { return false }

// AttnWindowFits is the C kernels' stand-in: it reports false.
func AttnWindowFits(n, hd int) bool { return false }

// AttnWindowFwd32 is the C kernel's stand-in: it reports false.
func AttnWindowFwd32(qkv, y, p []float32, bias []float64, mask []float32, heads, n, c int, scale float32) bool {
	return false
}

// AttnWindowBwd32 is the C kernel's stand-in: it reports false.
func AttnWindowBwd32(qkv, dy, dq, p, ds []float32, acc []float64, heads, n, c int, scale float32) bool {
	return false
}
