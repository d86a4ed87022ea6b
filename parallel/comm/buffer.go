package comm

import (
	"fmt"
	"unsafe"
)

// DType is the element type of a Buffer.
type DType uint8

// Element types.
const (
	Float32 DType = iota + 1
	Float64
	Int64
)

// String returns "float32", "float64" or "int64".
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int64:
		return "int64"
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
	}
	return 1
}

// Buffer is a flat slice of numbers a collective reads or writes. The concrete types are F32,
// F64 and I64; convert a slice to pass it: comm.F32(grad).
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
	}
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
