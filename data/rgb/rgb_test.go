package rgb_test

import (
	"bytes"
	"errors"
	"image"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data/internal/fixture"
	"github.com/gorgonia-parallel/gp/data/rgb"
)

// TestDecodeMatchesPIL compares every colour model with PIL's convert("RGB"). Non-JPEG formats
// are lossless and must match exactly. JPEGs match exactly through libjpeg-turbo (the library PIL
// links, same ISLOW IDCT and fancy upsampling). image/jpeg upsamples chroma by replication, not
// libjpeg's triangle filter, so on this deliberately noisy fixture single pixels differ by up to
// ~80 levels; the pure-Go build is held to a mean absolute difference of 6 levels instead.
func TestDecodeMatchesPIL(t *testing.T) {
	fx, err := fixture.Load()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(fx.Decode))
	for n := range fx.Decode {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		want := fx.Decode[name]
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(fixture.Dir(), "img", name))
			if err != nil {
				t.Fatal(err)
			}
			w, h, err := rgb.Size(data)
			if err != nil || w != want.W || h != want.H {
				t.Fatalf("Size = %d, %d, %v; want %d, %d", w, h, err, want.W, want.H)
			}
			var img rgb.Image
			if err := rgb.Decode(data, &img); err != nil {
				t.Fatal(err)
			}
			if img.W != want.W || img.H != want.H {
				t.Fatalf("decoded %dx%d, want %dx%d", img.W, img.H, want.W, want.H)
			}
			worst, sum := 0, 0
			for i := range img.Pix {
				d := int(img.Pix[i]) - int(want.RGB[i])
				worst = max(worst, d, -d)
				sum += max(d, -d)
			}
			if strings.HasSuffix(name, ".jpg") && !rgb.HaveTurbo {
				if mean := float64(sum) / float64(len(img.Pix)); mean > 6 {
					t.Errorf("%s (PIL mode %s): mean difference %.2f > 6", name, want.Mode, mean)
				}
			} else if worst > 0 {
				t.Errorf("%s (PIL mode %s): max difference %d, want exact", name, want.Mode, worst)
			}
		})
	}
}

// TestRegionDecode checks that a cropped libjpeg-turbo decode equals the same pixels of a full
// decode.
func TestRegionDecode(t *testing.T) {
	if !rgb.HaveTurbo {
		t.Skip("region decoding needs libjpeg-turbo (cgo)")
	}
	for _, name := range []string{"rgb420.jpg", "rgb444.jpg", "gray.jpg", "cmyk.jpg"} {
		data, err := os.ReadFile(filepath.Join(fixture.Dir(), "img", name))
		if err != nil {
			t.Fatal(err)
		}
		var full, part rgb.Image
		if err := rgb.Decode(data, &full); err != nil {
			t.Fatal(err)
		}
		for _, r := range [][4]int{{5, 3, 30, 20}, {17, 9, 37, 29}, {0, 0, 1, 1}, {20, 28, 21, 29}} {
			off, used, err := rgb.DecodeRegion(data, image.Rect(r[0], r[1], r[2], r[3]), 1, &part)
			if err != nil || used != 1 {
				t.Fatalf("%s %v: %v used %d", name, r, err, used)
			}
			if off.X > r[0] || off.Y != r[1] || off.X+part.W < r[2] || off.Y+part.H != r[3] {
				t.Fatalf("%s %v: got region at %v size %dx%d", name, r, off, part.W, part.H)
			}
			worst := 0
			for y := 0; y < part.H; y++ {
				for x := 0; x < part.W; x++ {
					for c := 0; c < 3; c++ {
						a := int(part.Pix[(y*part.W+x)*3+c])
						b := int(full.Pix[((y+off.Y)*full.W+x+off.X)*3+c])
						worst = max(worst, a-b, b-a)
					}
				}
			}
			if worst > 0 {
				t.Errorf("%s region %v: max difference %d from the full decode", name, r, worst)
			}
		}
	}
}

// TestRegionDecodeRandom checks many random regions of a larger 4:2:0 JPEG.
func TestRegionDecodeRandom(t *testing.T) {
	if !rgb.HaveTurbo {
		t.Skip("region decoding needs libjpeg-turbo (cgo)")
	}
	src := rgb.Image{}
	src.Resize(203, 151)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range src.Pix {
		src.Pix[i] = uint8(i*7/3%251) ^ uint8(r.IntN(64))
	}
	var buf bytes.Buffer
	if err := rgb.EncodeJPEG(&buf, &src, 90); err != nil {
		t.Fatal(err)
	}
	var full, part rgb.Image
	if err := rgb.Decode(buf.Bytes(), &full); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 300; k++ {
		x0, y0 := r.IntN(200), r.IntN(150)
		x1, y1 := x0+1+r.IntN(203-x0), y0+1+r.IntN(151-y0)
		off, _, err := rgb.DecodeRegion(buf.Bytes(), image.Rect(x0, y0, x1, y1), 1, &part)
		if err != nil {
			t.Fatal(err)
		}
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				for c := 0; c < 3; c++ {
					a := part.Pix[((y-off.Y)*part.W+x-off.X)*3+c]
					b := full.Pix[(y*full.W+x)*3+c]
					if a != b {
						t.Fatalf("region %v: pixel (%d,%d) channel %d = %d, full decode %d", image.Rect(x0, y0, x1, y1), x, y, c, a, b)
					}
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(fixture.Dir(), "img", "rgb420.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	png, _ := os.ReadFile(filepath.Join(fixture.Dir(), "img", "src.png"))
	corrupt := append([]byte(nil), good...)
	for i := len(corrupt) / 3; i < len(corrupt)-2; i++ {
		corrupt[i] = 0x55
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"zero-byte", nil},
		{"text", []byte("this is not an image\n")},
		{"truncated-jpeg", good[:len(good)/2]},
		{"jpeg-header-only", good[:20]},
		{"corrupt-jpeg", corrupt},
		{"truncated-png", png[:len(png)/2]},
		{"truncated-ppm", []byte("P6 10 10 255\n\x01\x02")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var img rgb.Image
			err := rgb.Decode(c.data, &img)
			if !errors.Is(err, rgb.ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
}
