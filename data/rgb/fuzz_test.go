package rgb_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data/internal/fixture"
	"github.com/gorgonia-parallel/gp/data/rgb"
)

// pngClaiming is a valid 1x1 PNG whose header then claims w×h pixels (checksum fixed up).
func pngClaiming(t testing.TB, w, h uint32) []byte {
	var buf bytes.Buffer
	if err := rgb.EncodePNG(&buf, &rgb.Image{W: 1, H: 1, Pix: []uint8{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// Signature (8), IHDR length (4), "IHDR" (4), width, height, ..., CRC over "IHDR"+data.
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// progressiveJPEGClaiming is a valid 1x1 grayscale progressive JPEG (PIL's, without its JFIF
// segment) whose SOF2 header then claims w×h pixels.
func progressiveJPEGClaiming(t testing.TB, w, h uint16) []byte {
	b, err := hex.DecodeString("ffd8ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c393338374048" +
		"5c4e404457453738506d51575f626768673e4d71797064785c656763ffc2000b080001000101011100ffc400140001000000" +
		"00000000000000000000000003ffda00080101000000010fffc40014100100000000000000000000000000000000ffda0008" +
		"0101000105027fffc40014100100000000000000000000000000000000ffda0008010100063f027fffc40014100100000000" +
		"000000000000000000000000ffda0008010100013f217fffda00080101000000107fffc40014100100000000000000000000" +
		"000000000000ffda0008010100013f107fffd9")
	if err != nil {
		t.Fatal(err)
	}
	// SOF2 at 71: marker (2), length (2), precision (1), height, width.
	binary.BigEndian.PutUint16(b[76:], h)
	binary.BigEndian.PutUint16(b[78:], w)
	return b
}

// TestBombsRefused: headers claiming more than MaxPixels, or data that is not there, fail
// from the header, before the pixels are allocated.
func TestBombsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"png 60000x60000", pngClaiming(t, 60000, 60000), "over the 178956970-pixel limit"},
		// libjpeg's jpeg_start_decompress allocates a progressive file's coefficients for the
		// whole image (1.8 GB here) and reads every scan: refused from the header instead.
		{"progressive jpeg 30000x30000", progressiveJPEGClaiming(t, 30000, 30000), "30000x30000 pixels is over the 178956970-pixel limit"},
		{"progressive jpeg 1x1", progressiveJPEGClaiming(t, 1, 1), ""},
		{"raw pgm 65536x65536", []byte("P5 65536 65536 255\n\x00"), "of 4294967296 bytes"},
		{"plain ppm 65536x65536", []byte("P3 65536 65536 255\n1 2 3"), "cannot hold 12884901888 samples"},
		// Width 0, height 2147423517: golang.org/x/image/bmp looped over the empty rows for 20 s.
		{"bmp 0x2147423517", []byte("BM\xbe\b\x00\x00\x00\x00\x00\x006\x00\x00\x00(\x00\x00\x00\x00\x00\x00\x00\x1d\x15\xff\x7f\x01\x00 \x00\x00\x00\x00\x00\x88\x04\x00\x00\xc4\x0e\x00\x01\x01\x94\x94\x94\x94\x94\x0e\xb9\xa9r\xcdA"), "has no pixels"},
	} {
		var img rgb.Image
		err := rgb.Decode(tc.data, &img)
		if tc.want == "" {
			if err != nil || img.W != 1 || img.H != 1 || img.Pix[0] != 100 {
				t.Errorf("%s: %dx%d image, pixel %v, error %v; want 1x1 of gray 100", tc.name, img.W, img.H, img.Pix, err)
			}
			continue
		}
		if !errors.Is(err, rgb.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrCorrupt saying %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecode checks that Size and Decode turn any bytes into an image or an error wrapping
// ErrCorrupt, never a panic; that a decoded image has the size Size reports; and that a
// decoded image written as PNG decodes back to the same pixels.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"rgb420.jpg", "gray.jpg", "gray.png", "rgb16.png", "gray16.png", "pal.png", "gray.pgm", "lossless.webp", "pal.bmp", "rgb.tif"} {
		b, err := os.ReadFile(filepath.Join(fixture.Dir(), "img", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("P3 2 1 255\n1 2 3 4 5 6\n"))
	f.Add([]byte("P6 1 1 65535\n\x01\x02\x03\x04\x05\x06"))
	f.Add(pngClaiming(f, 60000, 60000))
	f.Add(progressiveJPEGClaiming(f, 1, 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		w, h, err := rgb.Size(in)
		if err != nil {
			if !errors.Is(err, rgb.ErrCorrupt) {
				t.Fatalf("Size error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if w*h > 1<<18 && w*h <= rgb.MaxPixels {
			return // decodable but too large to fuzz quickly
		}
		var img rgb.Image
		if err := rgb.Decode(in, &img); err != nil {
			if !errors.Is(err, rgb.ErrCorrupt) {
				t.Fatalf("Decode error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if img.W != w || img.H != h || len(img.Pix) != 3*w*h {
			t.Fatalf("Decode gave %dx%d (%d bytes), Size said %dx%d", img.W, img.H, len(img.Pix), w, h)
		}
		if w == 0 || h == 0 {
			return
		}
		var buf bytes.Buffer
		if err := rgb.EncodePNG(&buf, &img); err != nil {
			t.Fatal(err)
		}
		var back rgb.Image
		if err := rgb.Decode(buf.Bytes(), &back); err != nil || !bytes.Equal(back.Pix, img.Pix) {
			t.Fatalf("PNG round trip of a %dx%d image: %v", w, h, err)
		}
	})
}
