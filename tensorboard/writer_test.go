package tensorboard_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/tensorboard"
)

// crc32c is CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) bit by bit, independent of
// hash/crc32, which the writer uses.
func crc32c(b []byte) uint32 {
	c := ^uint32(0)
	for _, x := range b {
		c ^= uint32(x)
		for k := 0; k < 8; k++ {
			if c&1 != 0 {
				c = c>>1 ^ 0x82f63b78
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func masked(b []byte) uint32 {
	c := crc32c(b)
	return (c>>15 | c<<17) + 0xa282ead8
}

// decoded is one Event as the test's own decoder reads it: every field of the message by
// number, so an unexpected field is seen.
type decoded struct {
	wall    float64
	step    int64
	version string
	tags    []string
	values  []float32
	other   []int // field numbers not expected
}

// readRecords parses the TFRecord framing of an event file, checking both checksums of each
// record, and decodes each Event's protobuf by hand.
func readRecords(t *testing.T, path string) []decoded {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []decoded
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			t.Fatalf("byte %d: %d bytes left, want a 12-byte record header", off, len(b)-off)
		}
		n := int(binary.LittleEndian.Uint64(b[off:]))
		if got, want := binary.LittleEndian.Uint32(b[off+8:]), masked(b[off:off+8]); got != want {
			t.Fatalf("byte %d: length crc %#x, want %#x", off, got, want)
		}
		if off+12+n+4 > len(b) {
			t.Fatalf("byte %d: record of %d bytes past the end of the file (%d bytes)", off, n, len(b))
		}
		data := b[off+12 : off+12+n]
		if got, want := binary.LittleEndian.Uint32(b[off+12+n:]), masked(data); got != want {
			t.Fatalf("byte %d: data crc %#x, want %#x", off, got, want)
		}
		out = append(out, decodeEvent(t, data))
		off += 12 + n + 4
	}
	return out
}

// pbField is one protobuf field: number, wire type, and its value.
type pbField struct {
	num, wire int
	u         uint64
	raw       []byte
}

func parsePB(t *testing.T, b []byte) []pbField {
	t.Helper()
	var fs []pbField
	varint := func() uint64 {
		var x uint64
		for shift := 0; ; shift += 7 {
			if len(b) == 0 || shift > 63 {
				t.Fatalf("bad varint")
			}
			c := b[0]
			b = b[1:]
			x |= uint64(c&0x7f) << shift
			if c < 0x80 {
				return x
			}
		}
	}
	for len(b) > 0 {
		key := varint()
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.u = varint()
		case 1:
			f.u, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			f.u, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l := int(varint())
			f.raw, b = b[:l], b[l:]
		default:
			t.Fatalf("wire type %d", f.wire)
		}
		fs = append(fs, f)
	}
	return fs
}

func decodeEvent(t *testing.T, b []byte) decoded {
	var d decoded
	for _, f := range parsePB(t, b) {
		switch {
		case f.num == 1 && f.wire == 1:
			d.wall = math.Float64frombits(f.u)
		case f.num == 2 && f.wire == 0:
			d.step = int64(f.u)
		case f.num == 3 && f.wire == 2:
			d.version = string(f.raw)
		case f.num == 5 && f.wire == 2:
			for _, v := range parsePB(t, f.raw) {
				if v.num != 1 || v.wire != 2 {
					d.other = append(d.other, 500+v.num)
					continue
				}
				for _, x := range parsePB(t, v.raw) {
					switch {
					case x.num == 1 && x.wire == 2:
						d.tags = append(d.tags, string(x.raw))
					case x.num == 2 && x.wire == 5:
						d.values = append(d.values, math.Float32frombits(uint32(x.u)))
					default:
						d.other = append(d.other, 5100+x.num)
					}
				}
			}
		default:
			d.other = append(d.other, f.num)
		}
	}
	return d
}

// TestWriterIndependentDecoder writes scalars (steps 0, large and negative, a long tag whose
// length needs a two-byte varint, NaN and infinity) and reads the file back with the test's
// own decoder: the framing and both checksums of every record, a file_version event first,
// then one event per scalar with its wall time, step, tag and float32 value.
func TestWriterIndependentDecoder(t *testing.T) {
	if got := crc32c([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("crc32c check value %#x, want 0xe3069283", got)
	}
	clock := time.Unix(1700000000, 250_000_000)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	dir := filepath.Join(t.TempDir(), "run")
	w, err := tensorboard.NewWriter(dir, tensorboard.WithClock(now), tensorboard.WithHostname("host1"), tensorboard.WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "events.out.tfevents.1700000001.host1"); w.Path() != want {
		t.Fatalf("path %s, want %s", w.Path(), want)
	}
	long := "train/" + strings.Repeat("x", 200)
	scalars := []struct {
		tag  string
		step int64
		v    float64
	}{
		{"train/loss", 0, 2.5},
		{"train/loss", 1, 1.25},
		{"val/top1", 1 << 40, 0.9132},
		{"lr", -3, 1e-4},
		{long, 7, math.Inf(1)},
		{"nan", 8, math.NaN()},
	}
	for _, s := range scalars {
		if err := w.Scalar(s.tag, s.step, s.v); err != nil {
			t.Fatal(err)
		}
	}
	// With WithFlushInterval(0) every event is on disk before Close.
	if got := readRecords(t, w.Path()); len(got) != 1+len(scalars) {
		t.Fatalf("%d records before Close, want %d", len(got), 1+len(scalars))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readRecords(t, w.Path())
	if len(got) != 1+len(scalars) {
		t.Fatalf("%d records, want %d", len(got), 1+len(scalars))
	}
	if g := got[0]; g.version != "brain.Event:2" || g.wall != 1700000001.25 || g.step != 0 || g.tags != nil || g.other != nil {
		t.Fatalf("first event %+v, want file_version brain.Event:2 at 1700000001.25", g)
	}
	for i, s := range scalars {
		g := got[1+i]
		wantWall := 1700000002.25 + float64(i)
		if g.version != "" || g.other != nil || g.wall != wantWall || g.step != s.step || len(g.tags) != 1 || g.tags[0] != s.tag || len(g.values) != 1 {
			t.Fatalf("event %d: %+v, want tag %s step %d at %v", 1+i, g, s.tag, s.step, wantWall)
		}
		if want := float32(s.v); g.values[0] != want && !(math.IsNaN(float64(want)) && math.IsNaN(float64(g.values[0]))) {
			t.Fatalf("event %d: value %v, want %v", 1+i, g.values[0], want)
		}
	}
	// The package's own reader agrees.
	evs, err := tensorboard.ReadFile(w.Path())
	if err != nil || len(evs) != len(got) || evs[0].FileVersion != tensorboard.FileVersion || evs[3].Step != 1<<40 || evs[3].Values[0] != (tensorboard.Value{Tag: "val/top1", Value: float32(0.9132)}) {
		t.Fatalf("ReadFile: %v, %+v", err, evs)
	}
}

// TestWriterMisuse: an empty tag is an error; after Close every call returns ErrClosed; a
// second writer in the same second gets its own file.
func TestWriterMisuse(t *testing.T) {
	dir := t.TempDir()
	at := func() time.Time { return time.Unix(1700000000, 0) }
	w, err := tensorboard.NewWriter(dir, tensorboard.WithClock(at), tensorboard.WithHostname("h"))
	if err != nil {
		t.Fatal(err)
	}
	w2, err := tensorboard.NewWriter(dir, tensorboard.WithClock(at), tensorboard.WithHostname("h"))
	if err != nil || w2.Path() != w.Path()+".1" {
		t.Fatalf("second writer: %v, path %s; want %s.1", err, w2.Path(), w.Path())
	}
	if err := w.Scalar("", 1, 1); err == nil {
		t.Fatal("empty tag: no error")
	}
	for _, x := range []*tensorboard.Writer{w, w2} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for name, err := range map[string]error{"Scalar": w.Scalar("a", 1, 1), "Flush": w.Flush(), "Close": w.Close()} {
		if !errors.Is(err, tensorboard.ErrClosed) {
			t.Fatalf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// TestWriterFlushesAndTruncation: the background flusher puts events on disk without Flush or
// Close; a file cut inside a record reads back as its complete records and io.ErrUnexpectedEOF;
// a flipped byte is ErrCorrupt.
func TestWriterFlushesAndTruncation(t *testing.T) {
	w, err := tensorboard.NewWriter(t.TempDir(), tensorboard.WithFlushInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range 25 {
				w.Scalar(fmt.Sprintf("g%d", g), int64(s), float64(s))
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := tensorboard.ReadFile(w.Path())
		if err == nil && len(evs) == 101 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s without Flush: %d events, %v; want 101", len(evs), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(w.Path())
	cut := filepath.Join(t.TempDir(), "cut")
	os.WriteFile(cut, b[:len(b)-3], 0o644)
	if evs, err := tensorboard.ReadFile(cut); !errors.Is(err, io.ErrUnexpectedEOF) || len(evs) != 100 {
		t.Fatalf("cut file: %d events, %v; want 100 and ErrUnexpectedEOF", len(evs), err)
	}
	b[len(b)-6] ^= 1
	os.WriteFile(cut, b, 0o644)
	if _, err := tensorboard.ReadFile(cut); !errors.Is(err, tensorboard.ErrCorrupt) {
		t.Fatalf("flipped byte: %v, want ErrCorrupt", err)
	}
}
