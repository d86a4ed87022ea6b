package ops

// ImplicitOff is implicitOff, for the external test package's benchmarks: true runs every
// convolution through the GEMM path (Note [Implicit convolution]).
var ImplicitOff = &implicitOff

// ImplicitWide is implicitWide: true takes the implicit convolution past its size bounds,
// for the benchmarks that measure where it pays.
var ImplicitWide = &implicitWide

// ImplicitAnyLevel is implicitAnyLevel: true takes the implicit convolution below AVX-512,
// for the benchmarks that measure its AVX2 kernels.
var ImplicitAnyLevel = &implicitAnyLevel

// ConvRowsOff is convRowsOff: true sends every convolution forward product to the BLAS.
var ConvRowsOff = &convRowsOff

// ShiftPadOff is shiftPadOff: true makes the implicit convolution mask its loads instead of
// reading padded planes.
var ShiftPadOff = &shiftPadOff

// OwnGEMMOff is ownGEMMOff: true sends the float32 products back to the BLAS where ownGEMM
// would send them to simd's kernels.
var OwnGEMMOff = &ownGEMMOff

// GatherOff turns the gathered forward of small maps off, for BenchmarkGatherAB.
var GatherOff = &gatherOff
