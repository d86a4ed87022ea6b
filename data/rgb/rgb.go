// Package rgb decodes image files into 8-bit interleaved RGB, converting every colour model the
// way PIL's Image.convert("RGB") does, with a libjpeg-turbo fast path when cgo is enabled.
package rgb

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registered so that a GIF misnamed .png still decodes as PIL would
	"image/jpeg"
	"image/png"

	"github.com/gorgonia-parallel/gp/internal/guard"

	_ "golang.org/x/image/bmp"  // .bmp
	_ "golang.org/x/image/tiff" // .tif, .tiff
	_ "golang.org/x/image/webp" // .webp
)

// ErrCorrupt marks input that is not a decodable image: truncated or corrupt data, a zero-byte
// file, an unknown format. Callers branch on it with errors.Is.
var ErrCorrupt = errors.New("corrupt or unsupported image")

// MaxPixels is the largest image decoded, in pixels: PIL's DecompressionBombError threshold
// (twice Image.MAX_IMAGE_PIXELS). A header claiming more is refused before any pixel memory is
// allocated, since a few hundred bytes of PNG or JPEG can claim gigabytes.
const MaxPixels = 178956970

// checkPixels refuses a w×h image of more than MaxPixels, and one without pixels (PIL opens
// none either): a BMP of width 0 and height 2^31 would otherwise have its decoder loop over
// two billion empty rows.
func checkPixels(w, h int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("image of %dx%d pixels has no pixels: %w", w, h, ErrCorrupt)
	}
	if h > MaxPixels/w {
		return fmt.Errorf("image of %dx%d pixels is over the %d-pixel limit (a decompression bomb?): %w", w, h, MaxPixels, ErrCorrupt)
	}
	return nil
}

// Image is an 8-bit RGB image: Pix holds H rows of W pixels, each R, G, B (HWC, row-major).
type Image struct {
	W, H int
	Pix  []uint8
}

// Resize sets the image to w×h, reusing Pix when it is large enough. Pixel values are undefined.
func (m *Image) Resize(w, h int) {
	m.W, m.H = w, h
	n := w * h * 3
	if cap(m.Pix) < n {
		m.Pix = make([]uint8, n)
	}
	m.Pix = m.Pix[:n]
}

// Size returns the width and height of the encoded image without decoding its pixels.
func Size(data []byte) (w, h int, err error) {
	if len(data) == 0 {
		return 0, 0, fmt.Errorf("zero-byte file: %w", ErrCorrupt)
	}
	if isJPEG(data) {
		if w, h, err := jpegSize(data); err == nil {
			return w, h, nil
		}
	}
	if isPNM(data) {
		w, h, _, _, err := pnmHeader(data)
		return w, h, err
	}
	var cfg image.Config
	err = guard.Call(func() error {
		var err error
		cfg, _, err = image.DecodeConfig(bytes.NewReader(data))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return cfg.Width, cfg.Height, nil
}

// Decode decodes a whole image into dst, reusing its memory.
func Decode(data []byte, dst *Image) error {
	_, _, err := DecodeRegion(data, image.Rectangle{}, 1, dst)
	return err
}

// DecodeRegion decodes at least the part r of the image scaled down by 1/denom (denom is 1, 2, 4
// or 8; r is in the scaled image's coordinates; an empty r means all of it) into dst. It returns
// where dst's top-left pixel lies in the scaled image and the denominator actually used: only the
// libjpeg-turbo path crops and scales (through the DCT, as libjpeg's scale_denom); other formats
// and the pure-Go build return the whole image with used == 1.
//
// Images over MaxPixels are refused from their header; a panic in a decoder (Go's image
// packages, golang.org/x/image) is returned as an error wrapping ErrCorrupt.
func DecodeRegion(data []byte, r image.Rectangle, denom int, dst *Image) (off image.Point, used int, err error) {
	if len(data) == 0 {
		return off, 1, fmt.Errorf("zero-byte file: %w", ErrCorrupt)
	}
	if isJPEG(data) && haveTurbo {
		return decodeJPEGTurbo(data, r, denom, dst)
	}
	if isPNM(data) {
		return off, 1, decodePNM(data, dst)
	}
	err = guard.Call(func() error {
		cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
		if err := checkPixels(cfg.Width, cfg.Height); err != nil {
			return err
		}
		img, _, err := image.Decode(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
		FromImage(img, dst)
		return nil
	})
	if errors.Is(err, guard.ErrPanic) {
		err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return off, 1, err
}

func isJPEG(b []byte) bool { return len(b) > 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF }

// FromImage converts any image.Image to RGB as PIL's convert("RGB") would: alpha is dropped
// (not composited), palettes are looked up, 16-bit grayscale is clipped to 255 (PIL opens it as
// mode "I"), 16-bit colour keeps the high byte, and CMYK uses PIL's cmyk2rgb.
func FromImage(src image.Image, dst *Image) {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	dst.Resize(w, h)
	p := dst.Pix
	switch m := src.(type) {
	case *image.YCbCr:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				yi := m.YOffset(b.Min.X+x, b.Min.Y+y)
				ci := m.COffset(b.Min.X+x, b.Min.Y+y)
				r, g, bb := color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = r, g, bb
			}
		}
	case *image.Gray:
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			for x, v := range row {
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = v, v, v
			}
		}
	case *image.Gray16:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				i := y*m.Stride + 2*x
				v := uint16(m.Pix[i])<<8 | uint16(m.Pix[i+1])
				c := uint8(min(v, 255))
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = c, c, c
			}
		}
	case *image.NRGBA:
		copy4(p, m.Pix, m.Stride, w, h, 1)
	case *image.NRGBA64:
		copy4(p, m.Pix, m.Stride, w, h, 2)
	case *image.RGBA64:
		copy4(p, m.Pix, m.Stride, w, h, 2)
	case *image.Paletted:
		pal := make([][3]uint8, len(m.Palette))
		for i, c := range m.Palette {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			if nc, ok := c.(color.NRGBA); ok {
				n = nc
			}
			pal[i] = [3]uint8{n.R, n.G, n.B}
		}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				ci := m.Pix[y*m.Stride+x]
				var c [3]uint8
				if int(ci) < len(pal) {
					c = pal[ci]
				}
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = c[0], c[1], c[2]
			}
		}
	case *image.CMYK:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				i := y*m.Stride + 4*x
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = cmyk2rgb(m.Pix[i], m.Pix[i+1], m.Pix[i+2], m.Pix[i+3])
			}
		}
	default:
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				c := color.NRGBAModel.Convert(src.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				o := (y*w + x) * 3
				p[o], p[o+1], p[o+2] = c.R, c.G, c.B
			}
		}
	}
}

// copy4 copies the colour channels of a 4-channel image with bps bytes per sample, keeping the
// high byte (PIL's "RGB;16B" raw mode) and dropping alpha.
func copy4(dst, src []uint8, stride, w, h, bps int) {
	for y := 0; y < h; y++ {
		row := src[y*stride:]
		for x := 0; x < w; x++ {
			i := x * 4 * bps
			o := (y*w + x) * 3
			dst[o], dst[o+1], dst[o+2] = row[i], row[i+bps], row[i+2*bps]
		}
	}
}

// cmyk2rgb is Pillow's cmyk2rgb (libImaging/Convert.c): R = (255-K) - C*(255-K)/255 with
// MULDIV255 rounding.
func cmyk2rgb(c, m, y, k uint8) (uint8, uint8, uint8) {
	nk := 255 - int(k)
	f := func(v uint8) uint8 {
		t := int(v)*nk + 128
		return uint8(max(0, min(255, nk-((t+(t>>8))>>8))))
	}
	return f(c), f(m), f(y)
}

// EncodeJPEG and EncodePNG are here so generators and tests write images through one package.

// EncodeJPEG encodes m as a baseline 4:2:0 JPEG of the given quality (1..100).
func EncodeJPEG(w *bytes.Buffer, m *Image, quality int) error {
	return jpeg.Encode(w, m.ToNRGBA(), &jpeg.Options{Quality: quality})
}

// EncodePNG encodes m as an 8-bit RGB PNG.
func EncodePNG(w *bytes.Buffer, m *Image) error { return png.Encode(w, m.ToNRGBA()) }

// ToNRGBA returns an opaque image.NRGBA copy of m.
func (m *Image) ToNRGBA() *image.NRGBA {
	out := image.NewNRGBA(image.Rect(0, 0, m.W, m.H))
	for i, j := 0, 0; i < len(m.Pix); i, j = i+3, j+4 {
		out.Pix[j], out.Pix[j+1], out.Pix[j+2], out.Pix[j+3] = m.Pix[i], m.Pix[i+1], m.Pix[i+2], 255
	}
	return out
}

// Bounds returns the rectangle m covers when its top-left pixel is at off.
func (m *Image) Bounds(off image.Point) image.Rectangle {
	return image.Rect(off.X, off.Y, off.X+m.W, off.Y+m.H)
}

// HaveTurbo reports whether JPEGs decode through libjpeg-turbo (a cgo build) rather than
// image/jpeg.
const HaveTurbo = haveTurbo
