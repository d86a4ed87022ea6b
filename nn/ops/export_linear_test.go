package ops

// LinearDWOff is linearDWOff, for the external test package's benchmarks: true sends every
// linear layer's weight gradient to the BLAS.
var LinearDWOff = &linearDWOff

// LinearWeightGrad computes a linear layer's weight gradient dw (out×in) = dyᵀ·x (dy
// rows×out, x rows×in) with gemmPar while LinearDWOff is set and with simd.GemmDW32 (whatever
// GemmDWFits says) while it is clear; it reports false when the kernel refused the shape.
func LinearWeightGrad(rows, in, out int, dy, x, dw []float32) bool {
	if linearDWOff.Load() {
		gemmPar(true, false, out, in, rows, 1, dy, out, x, in, 0, dw, in)
		return true
	}
	return gemmDW(out, in, rows, dy, out, x, in, dw, in)
}
