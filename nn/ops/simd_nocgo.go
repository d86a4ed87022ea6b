//go:build !cgo || !amd64 || purego

package ops

// Without cgo (or off amd64) there are no C kernels: simdOK is false and the Go code runs.
// The functions below exist only so that callers compile; they are never called.

const simdOK = false

func simdGELUFwd(x, y []float32)      { gelu32Fwd(x, y) }
func simdGELUBwd(x, dy, dx []float32) { gelu32Bwd(x, dy, dx) }
func simdIm2colRange(g *convGeom, x, col []float32, ld, lo, hi int) {
	im2colRange(g, x, col, ld, lo, hi)
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
