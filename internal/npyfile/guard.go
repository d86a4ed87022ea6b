package npyfile

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"

	"codeberg.org/sbinet/npyio/npy"

	"github.com/gorgonia-parallel/gp/internal/guard"
)

// Guard runs fn, a call into npyio, with guard.Call: a panic becomes an error wrapping ErrBad
// and guard.ErrPanic. Callers wrap the error with the file and member being decoded.
func Guard(fn func() error) error {
	err := guard.Call(fn)
	if errors.Is(err, guard.ErrPanic) {
		return fmt.Errorf("%w: %w", ErrBad, err)
	}
	return err
}

// NewReader checks the .npy header at the start of r (size bytes in all, header included)
// with Parse and returns an npyio reader positioned at the data. size must be known: npyio
// allocates the whole array the header claims, so the claim is checked against it first. npyio is given Encode's canonical
// copy of the checked header, never the bytes of the file, and its own header parsing runs
// under Guard. Calls to the reader's Read should run under Guard too.
func NewReader(r io.Reader, size int64) (*npy.Reader, Header, error) {
	if size < 0 {
		return nil, Header{}, fmt.Errorf("%w: size unknown, so the header's claims cannot be checked", ErrBad)
	}
	h, err := Parse(r, size)
	if err != nil {
		return nil, Header{}, err
	}
	data := io.LimitReader(r, h.DataBytes())
	var nr *npy.Reader
	err = Guard(func() error {
		var err error
		nr, err = npy.NewReader(io.MultiReader(bytes.NewReader(Encode(h.Descr, h.Fortran, h.Shape)), data))
		return err
	})
	if err != nil && !errors.Is(err, ErrBad) {
		err = fmt.Errorf("%w: %w", ErrBad, err)
	}
	if err != nil {
		return nil, Header{}, err
	}
	return nr, h, nil
}

// ReadMember reads the .npy array stored in an .npz member: its header and data, checked as
// ReadArray checks them, with archive/zip verifying the member's checksum. The member's
// declared size bounds the header's claims, and memory grows only with the bytes read.
func ReadMember(zf *zip.File) (Header, []byte, error) {
	rc, err := zf.Open()
	if err != nil {
		return Header{}, nil, err
	}
	defer rc.Close()
	size := int64(-1)
	if zf.UncompressedSize64 <= 1<<62 {
		size = int64(zf.UncompressedSize64)
	}
	return ReadArray(rc, size)
}
