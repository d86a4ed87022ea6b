package ops

import "github.com/gorgonia-parallel/gp/internal/simd"

// The float32 loops that dominate a training step outside the GEMMs (im2col and col2im,
// GELU, the normalisations, ReLU, column sums, max-pooling, dropout's scaling) have C
// kernels in internal/simd at the AVX-512 and AVX2 levels, chosen at run time by the CPU
// (GP_SIMD forces one). Go's compiler does not vectorise, and these are short rows where
// Go's bounds checks and scalar code cost 3-8x. Each kernel computes what its Go counterpart
// here computes (the same algorithm; bit-identical, or within the ulps its doc states), and
// simd_test.go compares them at every level the CPU has. The wrappers below run the Go code
// when the kernel does not run (level off, no cgo); those that report a bool leave the Go
// code to their caller.

// simdMinLen is the shortest slice worth a cgo call for the elementwise kernels (a call
// costs about as much as 50 elements of the Go loop).
const simdMinLen = 64

// simdOK reports whether the C kernels run (the SIMD level is not off).
func simdOK() bool { return simd.On() }

func sGeom(g *convGeom) *simd.ConvGeom {
	return &simd.ConvGeom{C: g.C, H: g.H, W: g.W, KH: g.KH, KW: g.KW, SH: g.SH, SW: g.SW, PH: g.PH, PW: g.PW,
		DH: g.DH, DW: g.DW, OH: g.OH, OW: g.OW}
}

// simdGELUFwd is gelu32Fwd (y[i] = x[i]·Φ(x[i]), len(y) >= len(x)), within one ulp.
func simdGELUFwd(x, y []float32) {
	if !simd.GELUFwd(x, y) {
		gelu32Fwd(x, y)
	}
}

// simdGELUBwd is gelu32Bwd, within one ulp.
func simdGELUBwd(x, dy, dx []float32) {
	if !simd.GELUBwd(x, dy, dx) {
		gelu32Bwd(x, dy, dx)
	}
}

// simdIm2colRange is im2colRange for float32.
func simdIm2colRange(g *convGeom, x, col []float32, ld, lo, hi int) {
	if !simd.Im2col(sGeom(g), x, col, ld, lo, hi) {
		im2colRange(g, x, col, ld, lo, hi)
	}
}

// simdCol2imRange is col2imRange for float32.
func simdCol2imRange(g *convGeom, col, dx []float32, ld, lo, hi int) {
	if !simd.Col2im(sGeom(g), col, dx, ld, lo, hi) {
		col2imRange(g, col, dx, ld, lo, hi)
	}
}

// simdIm2colGather is im2colGather for float32 (colIndex's tables built).
func simdIm2colGather(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	if !simd.Im2colGather(sGeom(g), sc.gat, sc.padPos, sc.padOff, x, col, ld, lo, hi) {
		im2colGather(g, sc, x, col, ld, lo, hi)
	}
}

// simdIm2colShift is im2colRange for float32 when convShiftable(g), through
// sc.shiftTable(g)'s tables (which must be built).
func simdIm2colShift(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	if !simd.Im2colShift(sGeom(g), sc.shift, sc.shiftMask, x, col, ld, lo, hi) {
		im2colRange(g, x, col, ld, lo, hi)
	}
}

// simdCol2imShift is col2imRange for float32 when convShiftable(g), through
// sc.shiftTable(g)'s tables (which must be built).
func simdCol2imShift(g *convGeom, sc *convScratch, col, dx []float32, ld, lo, hi int) {
	if !simd.Col2imShift(sGeom(g), sc.shift, sc.shiftMask, col, dx, ld, lo, hi) {
		col2imRange(g, col, dx, ld, lo, hi)
	}
}

// simdCol2imIndexedAdd is col2imIndexedAdd for float32.
func simdCol2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) {
	if !simd.Col2imIndexedAdd(idx, P, col, dx, ld) {
		col2imIndexedAdd(idx, P, col, dx, ld)
	}
}

// simdReLU is reluBits32: y = v where sel's bits are positive as an int32, else +0.
func simdReLU(v, y, sel []float32) {
	if !simd.ReLUSel(v, y, sel) {
		reluBits32(v, y, sel)
	}
}

// simdAdd sets y = a + b (each sum one rounding, as the Go loop) through simd.AddTo when the
// kernels run and y is long enough for a call, and reports whether it did.
func simdAdd(a, b, y []float32) bool {
	if !simdOK() || len(a) < simdMinLen {
		return false
	}
	copy(y[:len(a)], a)
	simd.AddTo(y, b[:len(a)])
	return true
}

// simdMaxPoolSearch is maxPoolSearch for float32 on planes [lo, hi); y may be nil.
func simdMaxPoolSearch(g *convGeom, x, y []float32, arg []int32, lo, hi int) {
	if !simd.MaxPoolSearch(sGeom(g), x, y, arg, lo, hi) {
		maxPoolSearch(g, x, y, arg, lo, hi)
	}
}

// The kernels below report whether they ran; their callers run the Go loop when not.

// simdBNSums is bnSums's loop for channels [lo, hi) of x [n, c, hw].
func simdBNSums(x []float32, n, c, hw, lo, hi int, sum, sq []float64) bool {
	return simd.BNSums(x, n, c, hw, lo, hi, sum, sq)
}

// simdBNGradSums is bnGradSums's loop for channels [lo, hi), dy masked by sel unless nil.
func simdBNGradSums(x, dy, sel []float32, n, c, hw, lo, hi int, mean, sdy, sdyx []float64) bool {
	return simd.BNGradSums(x, dy, sel, n, c, hw, lo, hi, mean, sdy, sdyx)
}

// simdBNApply is bnApply's loop for rows [lo, hi) (row r is channel r % c).
func simdBNApply(x, y []float32, c, hw, lo, hi int, mean, istd, gamma, beta []float64, relu bool) bool {
	return simd.BNApply(x, y, c, hw, lo, hi, mean, istd, gamma, beta, relu)
}

// simdBNGradApply is bnGradApply's loop for rows [lo, hi), dy masked by sel unless nil.
func simdBNGradApply(x, dy, sel, dx []float32, c, hw, lo, hi int, k1, k2, k3 []float64) bool {
	return simd.BNGradApply(x, dy, sel, dx, c, hw, lo, hi, k1, k2, k3)
}

// simdLNForward is lnForward's loop for rows [lo, hi) of m elements.
func simdLNForward(x, y []float32, lo, hi, m int, gamma, beta []float64, eps float64, mean, istd []float64) bool {
	return simd.LNForward(x, y, lo, hi, m, gamma, beta, eps, mean, istd)
}

// simdLNBackward is one block of lnBackward: rows [r0, r1), gamma and beta gradients added
// into dgamma and dbeta.
func simdLNBackward(x, dy, dx []float32, r0, r1, m int, gamma, mean, istd, dgamma, dbeta []float64) bool {
	return simd.LNBackward(x, dy, dx, r0, r1, m, gamma, mean, istd, dgamma, dbeta)
}

// simdColSums sets db[o] = Σ_r dy[r·c+o] over rows r in order (biasGrad with inner == 1).
func simdColSums(dy []float32, rows, c int, db []float32) bool {
	return simd.ColSums(dy, rows, c, db)
}

// simdMaxPoolScatter is maxPool's gradient scatter for float32 on planes [lo, hi): every
// arg must lie in [0, hw) (maxPoolSearch's offsets do).
func simdMaxPoolScatter(arg []int32, dy, dx []float32, lo, hi, P, hw int) bool {
	return simd.MaxPoolScatter(arg, dy, dx, lo, hi, P, hw)
}

// simdScale sets y[i] = x[i]·s, len(y) >= len(x).
func simdScale(x, y []float32, s float32) bool {
	return simd.ScaleTo(x, y, s)
}
