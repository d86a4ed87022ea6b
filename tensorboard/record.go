package tensorboard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
)

// ErrCorrupt is wrapped by ReadFile's error for a record whose checksum or contents are wrong.
var ErrCorrupt = errors.New("tensorboard: corrupt event file")

// Event is what ReadFile decodes of one tensorflow.Event: its time and step, and either the
// file version or scalar values.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string  // set on a file's first event
	Values      []Value // the summary's simple values
}

// Value is one scalar of a summary.
type Value struct {
	Tag   string
	Value float32
}

// ReadFile reads an event file: every record's framing and both checksums, and the Event
// fields this package writes (others are skipped). It is for tests and tools that check what a
// run logged. A file that ends inside a record (a writer still running, or one that crashed)
// returns the complete events and an error wrapping io.ErrUnexpectedEOF; a checksum or
// encoding error wraps ErrCorrupt.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var evs []Event
	for off := int64(0); ; {
		var hdr [12]byte
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return evs, nil
		} else if err != nil {
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: header: %w", path, off, err)
		}
		n := binary.LittleEndian.Uint64(hdr[:8])
		if maskedCRC(hdr[:8]) != binary.LittleEndian.Uint32(hdr[8:]) {
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: length checksum: %w", path, off, ErrCorrupt)
		}
		if n > 1<<30 {
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: length %d: %w", path, off, n, ErrCorrupt)
		}
		// Memory grows with the bytes there are, not with the length a damaged header claims.
		var buf bytes.Buffer
		if got, err := io.CopyN(&buf, r, int64(n)+4); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: %d of %d bytes: %w", path, off, got, n+4, err)
		}
		rec := buf.Bytes()
		data := rec[:n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(rec[n:]) {
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: data checksum: %w", path, off, ErrCorrupt)
		}
		ev, err := decodeEvent(data)
		if err != nil {
			return evs, fmt.Errorf("tensorboard: %s: record at byte %d: %v: %w", path, off, err, ErrCorrupt)
		}
		evs = append(evs, ev)
		off += 12 + int64(n) + 4
	}
}

// Note [TFRecord framing]: a record is
//
//	uint64 length, little-endian
//	uint32 masked CRC-32C of the 8 length bytes
//	length bytes of data (one serialized Event)
//	uint32 masked CRC-32C of the data
//
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// putHeader writes a record's length and its checksum into hdr (12 bytes).
func putHeader(hdr []byte, n int) {
	binary.LittleEndian.PutUint64(hdr, uint64(n))
	binary.LittleEndian.PutUint32(hdr[8:], maskedCRC(hdr[:8]))
}

// putCRC writes the data's checksum into dst (4 bytes).
func putCRC(dst, data []byte) { binary.LittleEndian.PutUint32(dst, maskedCRC(data)) }

// Note [Event encoding]: the fields written, from tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto (tag byte = field number << 3 | wire type):
//
//	Event.wall_time      1 double   0x09 + 8 bytes little-endian
//	Event.step           2 int64    0x10 + varint (omitted when 0, as proto3 does)
//	Event.file_version   3 string   0x1a + varint length + bytes
//	Event.summary        5 Summary  0x2a + varint length + message
//	Summary.value        1 Value    0x0a + varint length + message (repeated)
//	Value.tag            1 string   0x0a + varint length + bytes
//	Value.simple_value   2 float    0x15 + 4 bytes little-endian

func appendEventHead(b []byte, wall float64, step int64) []byte {
	b = append(b, 0x09)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(wall))
	if step != 0 {
		b = append(b, 0x10)
		b = binary.AppendUvarint(b, uint64(step))
	}
	return b
}

func appendFileVersion(b []byte, wall float64, version string) []byte {
	b = appendEventHead(b, wall, 0)
	b = append(b, 0x1a)
	b = binary.AppendUvarint(b, uint64(len(version)))
	return append(b, version...)
}

func appendScalar(b []byte, wall float64, step int64, tag string, v float32) []byte {
	b = appendEventHead(b, wall, step)
	value := 1 + uvarintLen(uint64(len(tag))) + len(tag) + 5
	summary := 1 + uvarintLen(uint64(value)) + value
	b = append(b, 0x2a)
	b = binary.AppendUvarint(b, uint64(summary))
	b = append(b, 0x0a)
	b = binary.AppendUvarint(b, uint64(value))
	b = append(b, 0x0a)
	b = binary.AppendUvarint(b, uint64(len(tag)))
	b = append(b, tag...)
	b = append(b, 0x15)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func decodeEvent(b []byte) (Event, error) {
	var ev Event
	err := fields(b, func(num int, wire int, v uint64, raw []byte) error {
		switch {
		case num == 1 && wire == 1:
			ev.WallTime = math.Float64frombits(v)
		case num == 2 && wire == 0:
			ev.Step = int64(v)
		case num == 3 && wire == 2:
			ev.FileVersion = string(raw)
		case num == 5 && wire == 2:
			return fields(raw, func(num, wire int, _ uint64, raw []byte) error {
				if num != 1 || wire != 2 {
					return nil
				}
				var val Value
				ev.Values = append(ev.Values, val)
				p := &ev.Values[len(ev.Values)-1]
				return fields(raw, func(num, wire int, v uint64, raw []byte) error {
					switch {
					case num == 1 && wire == 2:
						p.Tag = string(raw)
					case num == 2 && wire == 5:
						p.Value = math.Float32frombits(uint32(v))
					}
					return nil
				})
			})
		}
		return nil
	})
	return ev, err
}

// fields calls fn with each field of a protobuf message: its number, wire type, and value
// (varint, fixed64 and fixed32 in v; length-delimited in raw). Groups are refused.
func fields(b []byte, fn func(num, wire int, v uint64, raw []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var raw []byte
		switch wire {
		case 0:
			if v, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("field %d: bad varint", num)
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("field %d: truncated fixed64", num)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("field %d: truncated fixed32", num)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: bad length", num)
			}
			raw, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("field %d: wire type %d", num, wire)
		}
		if err := fn(num, wire, v, raw); err != nil {
			return err
		}
	}
	return nil
}
