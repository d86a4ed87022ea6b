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

// ShiftTables returns the tables of Im2colShift and the implicit convolution (ConvShiftFwd,
// ConvShiftWGrad) for a geometry of stride 1 with OW == W: shift[q] is kernel offset q's
// (q = i·KW + j) offset of output pixel k's input from k, and bit k%16 of
// mask[q·ceil(P/16) + k/16] says that pixel's input is in the image (P = OH·OW; the bits of
// pixels past P are 0).
func ShiftTables(g *ConvGeom) (shift []int32, mask []uint16) {
	P, kk := g.OH*g.OW, g.KH*g.KW
	nch := (P + 15) / 16
	shift, mask = make([]int32, kk), make([]uint16, kk*nch)
	for i := 0; i < g.KH; i++ {
		for j := 0; j < g.KW; j++ {
			q := i*g.KW + j
			shift[q] = int32((i*g.DH-g.PH)*g.W + j*g.DW - g.PW)
			for k := 0; k < P; k++ {
				ih, iw := k/g.OW-g.PH+i*g.DH, k%g.OW-g.PW+j*g.DW
				if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
					mask[q*nch+k/16] |= 1 << (k % 16)
				}
			}
		}
	}
	return shift, mask
}

// ConvShift is the layout of an implicit convolution's operands (ConvShiftFwd,
// ConvShiftWGrad): C input and O output channels, KK taps, P output pixels per plane. Row
// r = c·KK + q of the im2col matrix, at output pixel k, is x[n·XN + c·XC + Off[q] + k]
// where bit k%16 of Mask[q·ceil(P/16) + k/16] is set, 0 where it is not (the bits of pixels
// past P are 0); the forward writes y[n·YN + o·YC + k]. The caller's tables must keep every
// element a set bit reads inside x. ShiftTables' shift and mask, with XC = P, XN = C·P,
// YC = P and YN = O·P, are a stride-1 convolution whose output has its input's size.
type ConvShift struct {
	C, O, KK, P    int
	XC, XN, YC, YN int
	Off            []int32
	Mask           []uint16
}

// ConvPad is how ConvShiftFwdPad and ConvShiftWGradPad read their planes (x; and for the
// data gradient, run as a forward, dy): each plane of OH×OW pixels copied by PadPlanes
// into a zero border of PH rows above and below and PW columns on each side, and tap q's
// element of output pixel (h, w) at Off[q] + h·(OW + 2·PW) + w of its padded plane (for a
// stride-1 tap at row and column offsets (di, dj): (di + PH)·(OW + 2·PW) + dj + PW).
type ConvPad struct {
	OH, OW, PH, PW int
	Off            []int32
}

// Size is the floats of one padded plane.
func (p *ConvPad) Size() int { return (p.OH + 2*p.PH) * (p.OW + 2*p.PW) }
