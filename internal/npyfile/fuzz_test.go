package npyfile

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/guard"
)

// seeds are well-formed arrays like the project's writers and numpy produce, plus the input
// that panics npyio.
func seeds() [][]byte {
	withData := func(descr string, shape []int, n int) []byte {
		return append(Encode(descr, false, shape), bytes.Repeat([]byte{0x3f}, n)...)
	}
	return [][]byte{
		withData("<f4", []int{2, 3}, 24),
		withData("<i8", nil, 8),
		withData("|u1", []int{2, 2, 2, 3}, 24),
		withData("<f8", []int{0}, 0),
		append(Encode(">i2", true, []int{3, 1}), 0, 1, 0, 2, 0, 3),
		withData("|b1", []int{3}, 3),
		withData("<U2", []int{1}, 8),
		[]byte(upstreamPanic),
	}
}

// FuzzReadArray checks that ReadArray never panics and that what it accepts round-trips:
// Encode of the parsed header followed by the data reads back the same header and data.
func FuzzReadArray(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, raw, err := ReadArray(bytes.NewReader(in), int64(len(in)))
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("error %v does not wrap ErrBad", err)
			}
			return
		}
		if int64(len(raw)) != h.DataBytes() || h.Offset+h.DataBytes() != int64(len(in)) {
			t.Fatalf("header %+v with %d data bytes from %d input bytes", h, len(raw), len(in))
		}
		again := append(Encode(h.Descr, h.Fortran, h.Shape), raw...)
		h2, raw2, err := ReadArray(bytes.NewReader(again), int64(len(again)))
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", h, err)
		}
		if h2.Descr != h.Descr || h2.Fortran != h.Fortran || !slices.Equal(h2.Shape, h.Shape) || !bytes.Equal(raw2, raw) {
			t.Fatalf("round trip: %+v became %+v", h, h2)
		}
	})
}

// FuzzNewReader checks that npyio, given only headers Parse accepted, never panics: Guard is
// a second line, and a panic reaching it here means Parse let through a header npyio cannot
// take.
func FuzzNewReader(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, h, err := NewReader(bytes.NewReader(in), int64(len(in)))
		if errors.Is(err, guard.ErrPanic) {
			t.Fatalf("npyio panicked on a checked header: %v", err)
		}
		if err != nil {
			return
		}
		var dst any
		switch h.Descr {
		case "<f4":
			dst = new([]float32)
		case "<f8":
			dst = new([]float64)
		case "<i8":
			dst = new([]int64)
		case "<i4":
			dst = new([]int32)
		case "|u1":
			dst = new([]uint8)
		default:
			dst = new([]float64)
		}
		if err := Guard(func() error { return r.Read(dst) }); errors.Is(err, guard.ErrPanic) {
			t.Fatalf("npyio panicked reading %+v: %v", h, err)
		}
	})
}
