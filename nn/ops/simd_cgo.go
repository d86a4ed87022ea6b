//go:build cgo && amd64 && !purego

package ops

// AVX-512 kernels in C for the float32 loops that dominate a training step outside the
// GEMMs: GELU (Swin), im2col and col2im (ResNet). Go's compiler does not vectorise, and
// these loops are short rows (a 16-pixel line of an im2col row, an 8-wide double-precision
// polynomial) where Go's bounds checks and scalar code cost 3-8x. Each kernel computes what
// its Go counterpart does (the same algorithm, the same float64 polynomials for GELU), and
// runs only when the CPU has AVX-512 (simdOK); otherwise, and without cgo, the Go code runs.
// simd_test.go compares each with its Go counterpart.

/*
#cgo CFLAGS: -O3
#include "simd_kern.h"
*/
import "C"

import "unsafe"

// simdOK reports whether the CPU runs the AVX-512 kernels (checked once, at start-up).
var simdOK = C.gp_simd_ok() != 0

func f32p(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(s)))
}

func i32p(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(unsafe.SliceData(s)))
}

// simdGELUFwd is gelu32Fwd (y[i] = x[i]·Φ(x[i]), len(y) >= len(x)) on AVX-512.
func simdGELUFwd(x, y []float32) {
	y = y[:len(x)]
	C.gp_gelu_fwd(f32p(x), f32p(y), C.long(len(x)))
}

// simdGELUBwd is gelu32Bwd on AVX-512.
func simdGELUBwd(x, dy, dx []float32) {
	dy, dx = dy[:len(x)], dx[:len(x)]
	C.gp_gelu_bwd(f32p(x), f32p(dy), f32p(dx), C.long(len(x)))
}

func cGeom(g *convGeom) C.gp_geom {
	return C.gp_geom{C: C.int(g.C), H: C.int(g.H), W: C.int(g.W), KH: C.int(g.KH), KW: C.int(g.KW),
		SH: C.int(g.SH), SW: C.int(g.SW), PH: C.int(g.PH), PW: C.int(g.PW), DH: C.int(g.DH), DW: C.int(g.DW),
		OH: C.int(g.OH), OW: C.int(g.OW)}
}

// simdIm2colRange is im2colRange for float32 on AVX-512.
func simdIm2colRange(g *convGeom, x, col []float32, ld, lo, hi int) {
	if lo >= hi || g.OH*g.OW == 0 {
		return
	}
	cg := cGeom(g)
	_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	_ = x[g.C*g.H*g.W-1]
	C.gp_im2col(&cg, f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi))
}

// simdCol2imRange is col2imRange for float32 on AVX-512.
func simdCol2imRange(g *convGeom, col, dx []float32, ld, lo, hi int) {
	if lo >= hi {
		return
	}
	cg := cGeom(g)
	_ = dx[hi*g.H*g.W-1]
	if g.OH*g.OW > 0 {
		_ = col[(hi*g.KH*g.KW-1)*ld+g.OH*g.OW-1]
	}
	C.gp_col2im(&cg, f32p(col), f32p(dx), C.long(ld), C.int(lo), C.int(hi))
}

// simdIm2colGather is im2colGather for float32 (colIndex's tables built) on AVX-512.
func simdIm2colGather(g *convGeom, sc *convScratch, x, col []float32, ld, lo, hi int) {
	P := g.OH * g.OW
	if lo >= hi || P == 0 {
		return
	}
	_ = col[(hi*g.KH*g.KW-1)*ld+P-1]
	_ = x[hi*g.H*g.W-1]
	C.gp_im2col_gather(f32p(x), f32p(col), C.long(ld), C.int(lo), C.int(hi), C.int(g.KH*g.KW), C.int(P),
		C.long(g.H*g.W), i32p(sc.gat), i32p(sc.padPos), i32p(sc.padOff))
}

// simdCol2imIndexedAdd is col2imIndexedAdd for float32 on AVX-512.
func simdCol2imIndexedAdd(idx []int32, P int, col, dx []float32, ld int) {
	if len(idx) == 0 || P == 0 {
		return
	}
	rows := len(idx) / P
	_ = col[(rows-1)*ld+P-1]
	C.gp_col2im_indexed_add(i32p(idx), C.long(rows), C.int(P), f32p(col), f32p(dx), C.long(len(dx)), C.long(ld))
}
