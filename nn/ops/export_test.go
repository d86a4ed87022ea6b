package ops

// ImplicitOff is implicitOff, for the external test package's benchmarks: true runs every
// convolution through the GEMM path (Note [Implicit convolution]).
var ImplicitOff = &implicitOff
