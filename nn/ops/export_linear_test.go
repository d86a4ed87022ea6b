package ops

// LinearDWOff is linearDWOff, for the external test package's benchmarks: true sends every
// linear layer's weight gradient to the BLAS.
var LinearDWOff = &linearDWOff

// LinearWeightGrad computes a linear layer's weight gradient dw (out×in) = dyᵀ·x (dy
// rows×out, x rows×in) as linearGrad does, with simd.GemmDW32 when kernel is set (whatever
// GemmDWFits says) or with gemmPar; it reports false when the kernel refused the shape.
func LinearWeightGrad(kernel bool, rows, in, out int, dy, x, dw []float32) bool {
	if kernel {
		return gemmDW(out, in, rows, dy, out, x, in, dw, in)
	}
	gemmPar(true, false, out, in, rows, 1, dy, out, x, in, 0, dw, in)
	return true
}
