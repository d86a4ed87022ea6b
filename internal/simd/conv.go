package simd

// ConvGeom is one image's convolution or pooling geometry, as nn/ops's convGeom: C input
// channels of H×W, a KH×KW kernel with strides SH, SW, padding PH, PW and dilations DH,
// DW, giving OH×OW outputs. Every layout is NCHW, row-major.
type ConvGeom struct {
	C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW int
}

// The convolution, pooling, normalisation and activation kernels of nn/ops (conv_cgo.go)
// and window attention's (gemm_cgo.go) each report whether they ran: false at level Off
// (and in builds without the C kernels), when the caller runs its Go code. Each kernel's
// doc names the nn/ops or models/swin function it mirrors; slices are checked against the
// geometry before any C code reads them.
