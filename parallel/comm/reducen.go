package comm

import (
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// reduceN stores ins[0] op ins[1] op ... op ins[n-1] (in that order) in out, which may alias
// one of ins element for element. Sums of up to four inputs are fused (one pass, one store
// per element, the same order of additions); the rest works in blocks that stay in L1,
// through tmp.
func reduceN(dt DType, op Op, out []byte, ins [][]byte, tmp []byte) {
	n := len(ins)
	if dt == BFloat16 || dt == Float16 {
		reduceHalf(dt, op, out, ins) // one rounding for all n inputs
		return
	}
	if (op == Sum || op == Avg) && n <= 4 {
		switch dt {
		case Float32:
			sumN(asSlice[float32](out), ins)
		case Float64:
			sumN(asSlice[float64](out), ins)
		case Int64:
			sumN(asSlice[int64](out), ins)
		}
		return
	}
	const blk = 4096
	for lo := 0; lo < len(out); lo += blk {
		hi := min(lo+blk, len(out))
		if n == 2 {
			reduceInto(dt, op, out[lo:hi], ins[0][lo:hi], ins[1][lo:hi])
			continue
		}
		acc := tmp[:hi-lo]
		reduceInto(dt, op, acc, ins[0][lo:hi], ins[1][lo:hi])
		for p := 2; p < n-1; p++ {
			reduceInto(dt, op, acc, acc, ins[p][lo:hi])
		}
		reduceInto(dt, op, out[lo:hi], acc, ins[n-1][lo:hi])
	}
}

// sumN is reduceN's fused sum of two to four inputs: o[i] = ((x0[i]+x1[i])+x2[i])+x3[i].
// float32 goes through simd.SumF32 (SSE2 on amd64, the same additions lane by lane) first.
func sumN[T number](o []T, ins [][]byte) {
	xs := make([][]T, len(ins))
	for p, in := range ins {
		xs[p] = asSlice[T](in)[:len(o)]
	}
	if of, ok := any(o).([]float32); ok {
		xf := make([][]float32, len(xs))
		for p := range xs {
			xf[p] = any(xs[p]).([]float32)
		}
		d := simd.SumF32(of, xf)
		o = o[d:]
		for p := range xs {
			xs[p] = xs[p][d:]
		}
	}
	x0, x1 := xs[0], xs[1]
	switch len(xs) {
	case 2:
		for i := range o {
			o[i] = x0[i] + x1[i]
		}
	case 3:
		x2 := xs[2]
		for i := range o {
			o[i] = x0[i] + x1[i] + x2[i]
		}
	case 4:
		x2, x3 := xs[2], xs[3]
		for i := range o {
			o[i] = x0[i] + x1[i] + x2[i] + x3[i]
		}
	}
}

// asSlice views b as elements of type T (len(b) a multiple of T's size).
func asSlice[T number](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}
