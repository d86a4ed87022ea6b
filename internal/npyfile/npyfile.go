// Package npyfile parses and checks .npy headers and reads .npy arrays and .npz members, so
// that no file reaches a decoder with a header it could panic or over-allocate on.
//
// Every reader of .npy or .npz data in the project goes through it: Parse checks the magic,
// the version, the header length against the bytes there are, the dictionary's syntax, the
// dtype and the shape (no negative dimension, no overflowing element count, and the data the
// shape claims present in the file or member) before anything of the claimed size is
// allocated. ReadArray reads the data it checked; NewReader hands npyio a canonical copy of
// the checked header (npyio parses only that one layout reliably) and Guard turns a panic in
// npyio into an error.
package npyfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrBad is wrapped by every error for a header or array that is not a well-formed .npy.
var ErrBad = errors.New("npy: not a well-formed .npy array")

// Magic is the six bytes every .npy file starts with.
const Magic = "\x93NUMPY"

// MaxHeaderLen is the longest header dictionary accepted (numpy's read_array_header refuses
// more than 10,000 bytes by default; 1 MiB leaves room for thousands of dimensions).
const MaxHeaderLen = 1 << 20

// Header is a checked .npy header.
type Header struct {
	Major, Minor int    // format version: 1.0, 2.0 or 3.0
	Descr        string // dtype string as numpy writes it, e.g. "<f4", "|u1"
	Fortran      bool   // data in Fortran (column-major) order
	Shape        []int  // dimensions; empty for a scalar
	Offset       int64  // bytes from the start of the file to the data
	ItemSize     int    // bytes per element
	Elems        int64  // product of Shape
}

// DataBytes is the size in bytes of the data the header describes.
func (h Header) DataBytes() int64 { return h.Elems * int64(h.ItemSize) }

// Parse reads the preamble and header from r (exactly Offset bytes) and checks them. size is
// the length of the whole file or member, header included, or -1 when unknown; when known, a
// header whose data would run past size is refused, so callers may allocate DataBytes.
// Errors wrap ErrBad and say what is wrong; they do not name the file (callers do).
func Parse(r io.Reader, size int64) (Header, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:10]); err != nil {
		return Header{}, fmt.Errorf("%w: preamble: %w", ErrBad, noEOF(err))
	}
	if string(pre[:6]) != Magic {
		return Header{}, fmt.Errorf("%w: magic %q, want %q", ErrBad, pre[:6], Magic)
	}
	h := Header{Major: int(pre[6]), Minor: int(pre[7])}
	var hlen int64
	switch h.Major {
	case 1:
		hlen = int64(binary.LittleEndian.Uint16(pre[8:10]))
		h.Offset = 10
	case 2, 3:
		if _, err := io.ReadFull(r, pre[10:12]); err != nil {
			return Header{}, fmt.Errorf("%w: preamble: %w", ErrBad, noEOF(err))
		}
		hlen = int64(binary.LittleEndian.Uint32(pre[8:12]))
		h.Offset = 12
	default:
		return Header{}, fmt.Errorf("%w: format version %d.%d (want 1.0, 2.0 or 3.0)", ErrBad, h.Major, h.Minor)
	}
	if h.Minor != 0 {
		return Header{}, fmt.Errorf("%w: format version %d.%d (want 1.0, 2.0 or 3.0)", ErrBad, h.Major, h.Minor)
	}
	if hlen > MaxHeaderLen {
		return Header{}, fmt.Errorf("%w: header of %d bytes (at most %d accepted)", ErrBad, hlen, MaxHeaderLen)
	}
	if size >= 0 && h.Offset+hlen > size {
		return Header{}, fmt.Errorf("%w: header of %d bytes runs past the end (%d bytes)", ErrBad, hlen, size)
	}
	dict := make([]byte, hlen)
	if _, err := io.ReadFull(r, dict); err != nil {
		return Header{}, fmt.Errorf("%w: header of %d bytes: %w", ErrBad, hlen, noEOF(err))
	}
	h.Offset += hlen
	if err := h.parseDict(dict); err != nil {
		return Header{}, fmt.Errorf("%w: header %.80q: %w", ErrBad, dict, err)
	}
	if size >= 0 && h.DataBytes() > size-h.Offset {
		return Header{}, fmt.Errorf("%w: shape %v of %s needs %d data bytes, %d present", ErrBad, h.Shape, h.Descr, h.DataBytes(), size-h.Offset)
	}
	return h, nil
}

// ReadArray reads a whole .npy array of size bytes (header and data; -1 when unknown) from r
// and returns its header and data. Memory grows with the bytes actually read, never with what
// the header claims; bytes after the data are an error.
func ReadArray(r io.Reader, size int64) (Header, []byte, error) {
	h, err := Parse(r, size)
	if err != nil {
		return Header{}, nil, err
	}
	raw, err := readN(r, h.DataBytes())
	if err != nil {
		return Header{}, nil, fmt.Errorf("%w: data of shape %v (%s): %w", ErrBad, h.Shape, h.Descr, err)
	}
	// Reading to the end also makes archive/zip verify a member's checksum.
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n != 0 {
		extra, _ := io.Copy(io.Discard, r)
		return Header{}, nil, fmt.Errorf("%w: %d bytes after the data of shape %v", ErrBad, extra+1, h.Shape)
	}
	if err != io.EOF {
		return Header{}, nil, fmt.Errorf("%w: after the data of shape %v: %w", ErrBad, h.Shape, err)
	}
	return h, raw, nil
}

// readN reads exactly n bytes, growing its buffer in steps as data arrives.
func readN(r io.Reader, n int64) ([]byte, error) {
	const step = 4 << 20
	if n <= step {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, noEOF(err)
	}
	var buf bytes.Buffer
	buf.Grow(step)
	got, err := io.Copy(&buf, io.LimitReader(r, n))
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("%d of %d bytes: %w", got, n, io.ErrUnexpectedEOF)
	}
	return buf.Bytes(), nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Encode returns the preamble and header numpy writes for h's dtype, order and shape
// (version 1.0, or 2.0 when the dictionary does not fit in 65,535 bytes), padded so the data
// starts at a multiple of 64 bytes. Parse of the result gives back Descr, Fortran and Shape.
func Encode(descr string, fortran bool, shape []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := "(" + strings.Join(dims, ", ")
	if len(dims) == 1 {
		tuple += ","
	}
	tuple += ")"
	order := "False"
	if fortran {
		order = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, order, tuple)
	pre := 10
	if len(dict)+1+64 > math.MaxUint16 {
		pre = 12
	}
	pad := (64 - (pre+len(dict)+1)%64) % 64
	hdr := dict + strings.Repeat(" ", pad) + "\n"
	out := make([]byte, 0, pre+len(hdr))
	out = append(out, Magic...)
	if pre == 10 {
		out = append(out, 1, 0)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(hdr)))
	} else {
		out = append(out, 2, 0)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(hdr)))
	}
	return append(out, hdr...)
}
