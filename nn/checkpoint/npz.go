// Package checkpoint saves and loads state dicts (model parameters and buffers with
// torchvision's keys, optimizer and scheduler state, step, epoch, RNG state) as .npz files
// that numpy.load and torch read, and that numpy.savez of a torch state_dict produces.
package checkpoint

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/npyfile"
	"github.com/gorgonia-parallel/gp/nn"
)

// ErrCorrupt is wrapped by errors for unreadable, truncated or inconsistent files.
var ErrCorrupt = errors.New("checkpoint: corrupt file")

// testHookWriter, when set by tests, wraps the writer of Save (to inject write errors).
var testHookWriter func(io.Writer) io.Writer

// Save writes entries to path as an uncompressed .npz (like numpy.savez), atomically and
// durably with WriteFile: on any error the previous file at path is left intact, no
// temporary file remains, and the error names path.
func Save(path string, entries []nn.StateEntry) error {
	return WriteFile(path, func(w io.Writer) error {
		if testHookWriter != nil {
			w = testHookWriter(w)
		}
		return Write(w, entries)
	})
}

// SaveArray writes one entry as a .npy file (format 1.0, like numpy.save), atomically as
// Save does. Its name is not stored.
func SaveArray(path string, e nn.StateEntry) error {
	if err := checkEntry(e); err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", path, err)
	}
	return WriteFile(path, func(w io.Writer) error { return writeNpy(w, e) })
}

// Write writes entries to w as an uncompressed .npz archive: one "<name>.npy" member per
// entry, C order, little-endian, dtype <f4, <f8 or <i8.
func Write(w io.Writer, entries []nn.StateEntry) error {
	zw := zip.NewWriter(w)
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.Name] {
			return fmt.Errorf("checkpoint: key %q appears twice", e.Name)
		}
		seen[e.Name] = true
		if err := checkEntry(e); err != nil {
			return err
		}
		mw, err := zw.CreateHeader(&zip.FileHeader{Name: e.Name + ".npy", Method: zip.Store})
		if err != nil {
			return fmt.Errorf("checkpoint: key %q: %w", e.Name, err)
		}
		if err := writeNpy(mw, e); err != nil {
			return fmt.Errorf("checkpoint: key %q: %w", e.Name, err)
		}
	}
	return zw.Close()
}

func checkEntry(e nn.StateEntry) error {
	set := 0
	for _, ok := range []bool{e.F32 != nil, e.F64 != nil, e.I64 != nil} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("checkpoint: key %q: %d of F32, F64, I64 set, want exactly one", e.Name, set)
	}
	n := 1
	for _, d := range e.Shape {
		n *= d
	}
	if n != e.Numel() {
		return fmt.Errorf("checkpoint: key %q: shape %v holds %d elements, data has %d", e.Name, e.Shape, n, e.Numel())
	}
	return nil
}

func writeNpy(w io.Writer, e nn.StateEntry) error {
	descr := "<f4"
	switch {
	case e.F64 != nil:
		descr = "<f8"
	case e.I64 != nil:
		descr = "<i8"
	}
	// npyfile.Encode pads the header as numpy does, so the data starts 64-byte aligned.
	buf := make([]byte, 0, 64*1024)
	buf = append(buf, npyfile.Encode(descr, false, e.Shape)...)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	n := e.Numel()
	for i := range n {
		switch {
		case e.F32 != nil:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(e.F32[i]))
		case e.F64 != nil:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(e.F64[i]))
		default:
			buf = binary.LittleEndian.AppendUint64(buf, uint64(e.I64[i]))
		}
		if len(buf) >= cap(buf)-8 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Load reads every entry of the .npz file at path. Errors name the file, and the key when
// the damage is inside one array; damaged files wrap ErrCorrupt.
func Load(path string) ([]nn.StateEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", path, err)
	}
	return Read(f, st.Size(), path)
}

// Read reads every entry of a .npz archive of size bytes from r; name is used in errors.
// Arrays may be <f4, <f8, <i8 or <i4 (read as int64), in C order.
func Read(r io.ReaderAt, size int64, name string) ([]nn.StateEntry, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w: %w", name, ErrCorrupt, err)
	}
	out := make([]nn.StateEntry, 0, len(zr.File))
	for _, zf := range zr.File {
		key := strings.TrimSuffix(zf.Name, ".npy")
		e, err := readMember(zf, key)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: load %s: key %q: %w: %w", name, key, ErrCorrupt, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// readMember reads one member through npyfile, which checks its header before anything of
// the header's claimed size is allocated; the guard covers archive/zip's decompressors, which
// the member's bytes drive. npyfile's own parsing is fuzzed without it (FuzzReadArray).
func readMember(zf *zip.File, key string) (e nn.StateEntry, err error) {
	var (
		h   npyfile.Header
		raw []byte
	)
	if err := npyfile.Guard(func() error {
		var err error
		h, raw, err = npyfile.ReadMember(zf)
		return err
	}); err != nil {
		return nn.StateEntry{}, err
	}
	if h.Fortran {
		return nn.StateEntry{}, errors.New("Fortran-order arrays are not supported")
	}
	if _, ok := map[string]bool{"<f4": true, "<f8": true, "<i8": true, "<i4": true}[h.Descr]; !ok {
		return nn.StateEntry{}, fmt.Errorf("dtype %s not supported (want <f4, <f8, <i8 or <i4)", h.Descr)
	}
	n := int(h.Elems)
	e = nn.StateEntry{Name: key, Shape: append([]int{}, h.Shape...)}
	le := binary.LittleEndian
	switch h.Descr {
	case "<f4":
		e.F32 = make([]float32, n)
		for i := range e.F32 {
			e.F32[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case "<f8":
		e.F64 = make([]float64, n)
		for i := range e.F64 {
			e.F64[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
	case "<i8":
		e.I64 = make([]int64, n)
		for i := range e.I64 {
			e.I64[i] = int64(le.Uint64(raw[8*i:]))
		}
	case "<i4":
		e.I64 = make([]int64, n)
		for i := range e.I64 {
			e.I64[i] = int64(int32(le.Uint32(raw[4*i:])))
		}
	}
	return e, nil
}
