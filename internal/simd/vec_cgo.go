//go:build cgo && amd64 && !purego

package simd

/*
#cgo CFLAGS: -O3
#include "vec_avx512.h"
#include "vec_avx2.h"
*/
import "C"

func addTo(dst, src []float32) {
	dst = dst[:len(src)]
	if Current() == AVX512 {
		C.gp5_add_to(f32p(dst), f32p(src), C.long(len(src)))
		return
	}
	C.gp2_add_to(f32p(dst), f32p(src), C.long(len(src)))
}

func sgdMomentum(w, g, mom []float32, lr, mu float32) {
	g, mom = g[:len(w)], mom[:len(w)]
	if Current() == AVX512 {
		C.gp5_sgd_momentum(f32p(w), f32p(g), f32p(mom), C.long(len(w)), C.float(lr), C.float(mu))
		return
	}
	C.gp2_sgd_momentum(f32p(w), f32p(g), f32p(mom), C.long(len(w)), C.float(lr), C.float(mu))
}

func scale(x []float32, s float32) {
	if Current() == AVX512 {
		C.gp5_scale_inplace(f32p(x), C.long(len(x)), C.float(s))
		return
	}
	C.gp2_scale_inplace(f32p(x), C.long(len(x)), C.float(s))
}

func div(x []float32, d float32) {
	if Current() == AVX512 {
		C.gp5_div(f32p(x), C.long(len(x)), C.float(d))
		return
	}
	C.gp2_div(f32p(x), C.long(len(x)), C.float(d))
}
