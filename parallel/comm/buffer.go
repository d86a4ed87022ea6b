package comm

import (
	"fmt"
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// DType is the element type of a Buffer.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
	Int64
	// BFloat16 and Float16 are 16-bit floats (see [BF16] and [F16]).
	BFloat16
	Float16
)

// String returns "float32", "float64", "int64", "bfloat16" or "float16".
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int64:
		return "int64"
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float64, Int64:
		return 8
	case BFloat16, Float16:
		return 2
	}
	return 1
}

// Buffer is a flat slice of numbers a collective reads or writes. The concrete types are F32,
// F64, I64, BF16 and F16; convert a slice to pass it: comm.F32(grad).
type Buffer interface {
	// Len is the number of elements.
	Len() int
	// DType is the element type.
	DType() DType
	// bytes views the elements as bytes (no copy).
	bytes() []byte
}

// F32 is a []float32 Buffer.
type F32 []float32

// F64 is a []float64 Buffer.
type F64 []float64

// I64 is an []int64 Buffer.
type I64 []int64

// BF16 is a Buffer of bfloat16 values, each the upper 16 bits of a float32 (convert with
// simd.F32ToBF16 and simd.BF16ToF32). It halves the bytes a collective moves. See
// [Note 16-bit reductions] for how they are summed.
type BF16 []uint16

// F16 is a Buffer of IEEE 754 binary16 values (convert with simd.F32ToF16 and
// simd.F16ToF32), summed as [BF16] is.
type F16 []uint16

// Note 16-bit reductions
//
// A reduction of BF16 or F16 buffers widens its inputs to float32, combines them in float32
// and rounds the result to 16 bits (to nearest, ties to even) once per reduction step: a step
// that combines k inputs at once (the direct algorithm, the shared-memory stages) rounds once
// after all k; the ring over TCP rounds once per hop, as NCCL and gloo do for half precision.
// So a sum over n ranks carries at most n-1 roundings of 16 bits each. Every element is still
// reduced by one rank in an order fixed by the world size, and its bits are then copied to the
// others, so all ranks get bit-identical results as for the other types. Avg divides the 16-bit
// sum by the world size in float32 and rounds again.

// Len is the number of elements.
func (b F32) Len() int { return len(b) }

// DType is Float32.
func (b F32) DType() DType { return Float32 }
func (b F32) bytes() []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b))
}

// Len is the number of elements.
func (b F64) Len() int { return len(b) }

// DType is Float64.
func (b F64) DType() DType { return Float64 }
func (b F64) bytes() []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 8*len(b))
}

// Len is the number of elements.
func (b I64) Len() int { return len(b) }

// DType is Int64.
func (b I64) DType() DType { return Int64 }
func (b I64) bytes() []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 8*len(b))
}

// Len is the number of elements.
func (b BF16) Len() int { return len(b) }

// DType is BFloat16.
func (b BF16) DType() DType  { return BFloat16 }
func (b BF16) bytes() []byte { return u16Bytes(b) }

// Len is the number of elements.
func (b F16) Len() int { return len(b) }

// DType is Float16.
func (b F16) DType() DType  { return Float16 }
func (b F16) bytes() []byte { return u16Bytes(b) }

func u16Bytes(b []uint16) []byte {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 2*len(b))
}

// Op is a reduction operation.
type Op uint8

// Reduction operations. Avg divides the sum by the world size; for I64 the division
// truncates toward zero.
const (
	Sum Op = iota + 1
	Avg
	Max
	Min
)

// String returns "sum", "avg", "max" or "min".
func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

func (o Op) valid() bool { return o >= Sum && o <= Min }

// ShardRange returns the half-open element range [lo, hi) of shard i when total elements are
// split over n ranks: shard i has total/n elements, plus one when i < total%n.
func ShardRange(total, n, i int) (lo, hi int) {
	q, r := total/n, total%n
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// reduceInto computes out[i] = a[i] op b[i] for byte views of elements of type dt. The three
// slices have equal length; out may alias a or b. Sum is used for Avg (the division happens
// once at the end).
func reduceInto(dt DType, op Op, out, a, b []byte) {
	if len(out) == 0 {
		return
	}
	switch dt {
	case Float32:
		n := len(out) / 4
		o := unsafe.Slice((*float32)(unsafe.Pointer(&out[0])), n)
		x := unsafe.Slice((*float32)(unsafe.Pointer(&a[0])), n)
		y := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
		reduceSlice(op, o, x, y)
	case Float64:
		n := len(out) / 8
		o := unsafe.Slice((*float64)(unsafe.Pointer(&out[0])), n)
		x := unsafe.Slice((*float64)(unsafe.Pointer(&a[0])), n)
		y := unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), n)
		reduceSlice(op, o, x, y)
	case Int64:
		n := len(out) / 8
		o := unsafe.Slice((*int64)(unsafe.Pointer(&out[0])), n)
		x := unsafe.Slice((*int64)(unsafe.Pointer(&a[0])), n)
		y := unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), n)
		reduceSlice(op, o, x, y)
	case BFloat16, Float16:
		reduceHalf(dt, op, out, [][]byte{a, b})
	}
}

// halfBlock is how many 16-bit elements reduceHalf widens at a time (two 2 KiB float32
// blocks on the stack, which stay in L1).
const halfBlock = 512

// reduceHalf stores ins[0] op ins[1] op ... op ins[n-1] in out for 16-bit elements of type dt,
// combining in float32 and rounding once (see Note 16-bit reductions). out may alias any
// of ins.
func reduceHalf(dt DType, op Op, out []byte, ins [][]byte) {
	o := asU16(out)
	var acc, in [halfBlock]float32
	for lo := 0; lo < len(o); lo += halfBlock {
		hi := min(lo+halfBlock, len(o))
		a, x := acc[:hi-lo], in[:hi-lo]
		widen(dt, a, asU16(ins[0])[lo:hi])
		for _, b := range ins[1:] {
			widen(dt, x, asU16(b)[lo:hi])
			reduceSlice(op, a, a, x)
		}
		narrow(dt, o[lo:hi], a)
	}
}

func widen(dt DType, dst []float32, src []uint16) {
	if dt == BFloat16 {
		simd.BF16ToF32(dst, src)
	} else {
		simd.F16ToF32(dst, src)
	}
}

func narrow(dt DType, dst []uint16, src []float32) {
	if dt == BFloat16 {
		simd.F32ToBF16(dst, src)
	} else {
		simd.F32ToF16(dst, src)
	}
}

func asU16(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

type number interface{ ~float32 | ~float64 | ~int64 }

func reduceSlice[T number](op Op, o, x, y []T) {
	x = x[:len(o)]
	y = y[:len(o)]
	switch op {
	case Sum, Avg:
		i := 0
		for ; i+4 <= len(o); i += 4 {
			o[i] = x[i] + y[i]
			o[i+1] = x[i+1] + y[i+1]
			o[i+2] = x[i+2] + y[i+2]
			o[i+3] = x[i+3] + y[i+3]
		}
		for ; i < len(o); i++ {
			o[i] = x[i] + y[i]
		}
	case Max:
		for i := range o {
			if y[i] > x[i] {
				o[i] = y[i]
			} else {
				o[i] = x[i]
			}
		}
	case Min:
		for i := range o {
			if y[i] < x[i] {
				o[i] = y[i]
			} else {
				o[i] = x[i]
			}
		}
	}
}

// divide divides every element of b by n (Avg's last step).
func divide(b Buffer, n int) {
	switch v := b.(type) {
	case F32:
		s := float32(n)
		for i := range v {
			v[i] /= s
		}
	case F64:
		s := float64(n)
		for i := range v {
			v[i] /= s
		}
	case I64:
		s := int64(n)
		for i := range v {
			v[i] /= s
		}
	case BF16:
		divideHalf(BFloat16, v, n)
	case F16:
		divideHalf(Float16, v, n)
	}
}

// divideHalf divides 16-bit values by n in float32 and rounds each once.
func divideHalf(dt DType, v []uint16, n int) {
	var x [halfBlock]float32
	s := float32(n)
	for lo := 0; lo < len(v); lo += halfBlock {
		hi := min(lo+halfBlock, len(v))
		f := x[:hi-lo]
		widen(dt, f, v[lo:hi])
		for i := range f {
			f[i] /= s
		}
		narrow(dt, v[lo:hi], f)
	}
}

func humanBytes(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
