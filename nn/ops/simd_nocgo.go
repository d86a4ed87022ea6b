//go:build !cgo || !amd64 || purego

package ops

// Without cgo (or off amd64) there are no C kernels: simdOK is false and the Go code runs.
// The functions below exist only so that callers compile; they are never called.

// simdOK is a variable, as with cgo, so that tests can set it.
var simdOK = false

const simdMinLen = 64

func simdGELUFwd(x, y []float32)      { gelu32Fwd(x, y) }
func simdGELUBwd(x, dy, dx []float32) { gelu32Bwd(x, dy, dx) }
func simdIm2colRange(g *convGeom, x, col []float32, ld, lo, hi int) {
	im2colRange(g, x, col, ld, lo, hi)
}
func simdIm2colShift(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	im2colRange(g, x, col, ld, lo, hi)
}
func simdCol2imShift(g *convGeom, sc *convScratch, col, dx []float32, ld, lo, hi int) {
	col2imRange(g, col, dx, ld, lo, hi)
}
func simdCol2imRange(g *convGeom, col, dx []float32, ld, lo, hi int) {
	col2imRange(g, col, dx, ld, lo, hi)
}
func simdCol2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) {
	col2imIndexedAdd(idx, P, col, dx, ld)
}
func simdIm2colGather(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	im2colGather(g, sc, x, col, ld, lo, hi)
}

func simdBNSums(x []float32, n, c, hw, lo, hi int, sum, sq []float64) {}

func simdBNGradSums(x, dy []float32, n, c, hw, lo, hi int, mean, sdy, sdyx []float64) {}

func simdBNApply(x, y []float32, c, hw, lo, hi int, mean, istd, gamma, beta []float64, relu bool) {}

func simdBNGradApply(x, dy, dx []float32, c, hw, lo, hi int, k1, k2, k3 []float64) {}

func simdReLU(v, y, sel []float32) { reluBits32(v, y, sel) }

func simdLNForward(x, y []float32, lo, hi, m int, gamma, beta []float64, eps float64, mean, istd []float64) {
}

func simdLNBackward(x, dy, dx []float32, r0, r1, m int, gamma, mean, istd, dgamma, dbeta []float64) {}

func simdColSums(dy []float32, rows, c int, db []float32) {}

func simdMaxPoolSearch(g *convGeom, x, y []float32, arg []int32, lo, hi int) {
	maxPoolSearch(g, x, y, arg, lo, hi)
}

func simdMaxPoolScatter(arg []int32, dy, dx []float32, lo, hi, P, hw int) {}

func simdScale(x, y []float32, s float32) {}
