//go:build cgo && amd64 && !purego

package simd

// #include <stddef.h>
import "C"

import "unsafe"

// kernelsBuilt: this build has the C kernels (cgo on amd64, no purego tag).
const kernelsBuilt = true

func f32p(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(unsafe.SliceData(s)))
}

func f64p(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(unsafe.SliceData(s)))
}

func i32p(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(unsafe.SliceData(s)))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
