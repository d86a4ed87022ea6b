package tensorboard_test

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/tensorboard"
)

// frame is one TFRecord: length, its masked CRC, data, the data's masked CRC.
func frame(data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(data)))
	b = binary.LittleEndian.AppendUint32(b, masked(b))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, masked(data))
}

// TestReadFileHugeLength: a header with a valid checksum claiming a 1 GiB record in a
// 12-byte file is a truncation error, read without allocating the claim.
func TestReadFileHugeLength(t *testing.T) {
	hdr := binary.LittleEndian.AppendUint64(nil, 1<<30)
	hdr = binary.LittleEndian.AppendUint32(hdr, masked(hdr))
	p := filepath.Join(t.TempDir(), "events")
	os.WriteFile(p, hdr, 0o644)
	_, err := tensorboard.ReadFile(p)
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "0 of 1073741828 bytes") {
		t.Errorf("error %v, want a truncation after 0 of 1073741828 bytes", err)
	}
}

// FuzzReadFile checks that ReadFile turns any file into events or an error naming the file,
// never a panic. With framed set the input is wrapped as one record with valid checksums, so
// that mutations reach the event decoder rather than stopping at the CRC.
func FuzzReadFile(f *testing.F) {
	f.Add([]byte{0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0x1a, 2, 'v', '2'}, true)
	f.Add([]byte{0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0, 0, 0x80, 0x3f}, true)
	f.Add(frame([]byte{0x10, 0x05}), false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, in []byte, framed bool) {
		if framed {
			in = frame(in)
		}
		p := filepath.Join(t.TempDir(), "events")
		if err := os.WriteFile(p, in, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := tensorboard.ReadFile(p); err != nil && !strings.Contains(err.Error(), p) {
			t.Fatalf("error %v does not name the file", err)
		}
	})
}

// FuzzWriterRoundTrip checks that a scalar a Writer logs reads back as written (or is
// refused when it is logged, for a tag the writer does not take).
func FuzzWriterRoundTrip(f *testing.F) {
	f.Add("loss", int64(3), float32(0.5))
	f.Add("top1/val", int64(-1), float32(math.Inf(1)))
	f.Add("", int64(0), float32(0))
	f.Fuzz(func(t *testing.T, tag string, step int64, v float32) {
		w, err := tensorboard.NewWriter(t.TempDir(), tensorboard.WithHostname("fuzz"), tensorboard.WithClock(func() time.Time { return time.Unix(1700000000, 0) }))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Scalar(tag, step, float64(v)); err != nil {
			w.Close()
			return // a tag the writer refuses (empty, too long): refused, not written
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		evs, err := tensorboard.ReadFile(w.Path())
		if err != nil || len(evs) != 2 {
			t.Fatalf("read back %d events, %v", len(evs), err)
		}
		got := evs[1]
		if got.Step != step || len(got.Values) != 1 || got.Values[0].Tag != tag ||
			!(got.Values[0].Value == v || v != v && got.Values[0].Value != got.Values[0].Value) {
			t.Fatalf("scalar %q step %d = %v read back as %+v", tag, step, v, got)
		}
	})
}
