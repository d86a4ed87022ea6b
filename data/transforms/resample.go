package transforms

import (
	"image"
	"math"

	"github.com/gorgonia-parallel/gp/data/rgb"
)

// The resampler is Pillow's ImagingResample (libImaging/Resample.c) for 8-bit images with the
// bilinear filter: coefficients in float64, normalised, rounded to 22-bit fixed point, a
// horizontal pass into an 8-bit intermediate, then a vertical pass. Only the output pixels inside
// the plan's window are computed, which gives the same values as resizing everything and then
// cropping, because each output pixel depends only on its own coefficients.

const precisionBits = 32 - 8 - 2

// coeffs holds, for each output pixel, the first input pixel, the tap count and ksize weights.
type coeffs struct {
	ksize  int
	bounds []int32 // xmin, xmax pairs
	k      []int32
	pre    []float64
}

// precompute is Pillow's precompute_coeffs + normalize_coeffs_8bpc for outputs [o0, o1) of an
// inSize → outSize resize of the box [in0, in1).
func (c *coeffs) precompute(inSize int, in0, in1 float64, outSize, o0, o1 int) {
	scale := (in1 - in0) / float64(outSize)
	filterscale := max(scale, 1.0)
	support := 1.0 * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	n := o1 - o0
	c.ksize = ksize
	c.bounds = grow(c.bounds, 2*n)
	c.k = grow(c.k, n*ksize)
	c.pre = grow(c.pre, ksize)
	ss := 1.0 / filterscale
	for xx := o0; xx < o1; xx++ {
		center := in0 + (float64(xx)+0.5)*scale
		ww := 0.0
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		k := c.pre[:ksize]
		for x := 0; x < xmax; x++ {
			w := bilinear((float64(x+xmin) - center + 0.5) * ss)
			k[x] = w
			ww += w
		}
		kk := c.k[(xx-o0)*ksize : (xx-o0+1)*ksize]
		for x := range kk {
			v := 0.0
			if x < xmax {
				v = k[x]
				if ww != 0 {
					v /= ww
				}
			}
			if v < 0 {
				kk[x] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				kk[x] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		c.bounds[2*(xx-o0)] = int32(xmin)
		c.bounds[2*(xx-o0)+1] = int32(max(xmax, 0))
	}
}

func bilinear(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func clip8(v int32) int32 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return v
}

// resample resizes crop (in img pixels) to pl.OutW×pl.OutH and writes pl.Win of the result,
// flipped if asked, through lut into dst (CHW).
func resample(img *rgb.Image, crop image.Rectangle, pl *Plan, lut *[3][256]float32, s *Scratch, dst []float32) {
	W, H := pl.Win.Dx(), pl.Win.Dy()
	// Output columns/rows of the resized image that the window needs.
	x0, x1 := max(pl.Win.Min.X, 0), min(pl.Win.Max.X, pl.OutW)
	y0, y1 := max(pl.Win.Min.Y, 0), min(pl.Win.Max.Y, pl.OutH)
	fillPadding(pl, lut, dst, x0, x1, y0, y1)
	if x1 <= x0 || y1 <= y0 {
		return
	}
	cw, ch := crop.Dx(), crop.Dy()
	s.hc.precompute(cw, 0, float64(cw), pl.OutW, x0, x1)
	s.vc.precompute(ch, 0, float64(ch), pl.OutH, y0, y1)
	nx, ny := x1-x0, y1-y0
	yfirst := int(s.vc.bounds[0])
	ylast := int(s.vc.bounds[2*(ny-1)] + s.vc.bounds[2*(ny-1)+1])
	rows := ylast - yfirst
	s.tmp = grow(s.tmp, rows*nx*3)
	tmp := s.tmp
	// Horizontal pass over the rows the vertical pass reads.
	hk, hb := s.hc.k, s.hc.bounds
	ks := s.hc.ksize
	stride := img.W * 3
	for r := 0; r < rows; r++ {
		src := img.Pix[(crop.Min.Y+yfirst+r)*stride+crop.Min.X*3:]
		out := tmp[r*nx*3 : (r+1)*nx*3]
		for xx := 0; xx < nx; xx++ {
			xmin, xmax := int(hb[2*xx]), int(hb[2*xx+1])
			k := hk[xx*ks : xx*ks+xmax]
			p := src[xmin*3 : (xmin+xmax)*3]
			s0, s1, s2 := int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1)), int32(1<<(precisionBits-1))
			for _, kv := range k {
				if len(p) < 3 {
					break
				}
				s0 += int32(p[0]) * kv
				s1 += int32(p[1]) * kv
				s2 += int32(p[2]) * kv
				p = p[3:]
			}
			o := out[3*xx : 3*xx+3]
			o[0], o[1], o[2] = uint8(clip8(s0)), uint8(clip8(s1)), uint8(clip8(s2))
		}
	}
	// Vertical pass, straight into the normalised CHW output.
	vk, vb := s.vc.k, s.vc.bounds
	ks = s.vc.ksize
	plane := W * H
	acc := grow(s.rows, nx*3)
	s.rows = acc
	for yy := 0; yy < ny; yy++ {
		ymin, ymax := int(vb[2*yy])-yfirst, int(vb[2*yy+1])
		k := vk[yy*ks : yy*ks+ymax]
		for i := range acc {
			acc[i] = 1 << (precisionBits - 1)
		}
		for t, kv := range k {
			row := tmp[(ymin+t)*nx*3 : (ymin+t+1)*nx*3]
			a := acc[:len(row)]
			for i, v := range row {
				a[i] += int32(v) * kv
			}
		}
		oy := y0 + yy - pl.Win.Min.Y
		base := oy * W
		r0, r1, r2 := dst[base:base+W], dst[plane+base:plane+base+W], dst[2*plane+base:2*plane+base+W]
		l0, l1, l2 := &lut[0], &lut[1], &lut[2]
		for xx := 0; xx < nx; xx++ {
			ox := x0 + xx - pl.Win.Min.X
			if pl.Flip {
				ox = W - 1 - ox
			}
			a := acc[3*xx : 3*xx+3]
			r0[ox] = l0[uint8(clip8(a[0]))]
			r1[ox] = l1[uint8(clip8(a[1]))]
			r2[ox] = l2[uint8(clip8(a[2]))]
		}
	}
}

// fillPadding writes the zero-pixel value to the parts of the window outside [x0,x1)×[y0,y1).
func fillPadding(pl *Plan, lut *[3][256]float32, dst []float32, x0, x1, y0, y1 int) {
	W, H := pl.Win.Dx(), pl.Win.Dy()
	if x0 == pl.Win.Min.X && x1 == pl.Win.Max.X && y0 == pl.Win.Min.Y && y1 == pl.Win.Max.Y {
		return
	}
	for c := 0; c < 3; c++ {
		v := lut[c][0]
		for y := 0; y < H; y++ {
			for x := 0; x < W; x++ {
				ax, ay := pl.Win.Min.X+x, pl.Win.Min.Y+y
				if ax < x0 || ax >= x1 || ay < y0 || ay >= y1 {
					ox := x
					if pl.Flip {
						ox = W - 1 - x
					}
					dst[c*W*H+y*W+ox] = v
				}
			}
		}
	}
}

// copyWindow writes the plan's window of an unresized crop starting at org (img pixels).
func copyWindow(img *rgb.Image, org image.Point, pl *Plan, lut *[3][256]float32, dst []float32) {
	W, H := pl.Win.Dx(), pl.Win.Dy()
	plane := W * H
	for y := 0; y < H; y++ {
		sy := org.Y + y
		for x := 0; x < W; x++ {
			sx := org.X + x
			ox := x
			if pl.Flip {
				ox = W - 1 - x
			}
			o := y*W + ox
			if sx < 0 || sy < 0 || sx >= img.W || sy >= img.H {
				dst[o], dst[plane+o], dst[2*plane+o] = lut[0][0], lut[1][0], lut[2][0]
				continue
			}
			i := (sy*img.W + sx) * 3
			dst[o] = lut[0][img.Pix[i]]
			dst[plane+o] = lut[1][img.Pix[i+1]]
			dst[2*plane+o] = lut[2][img.Pix[i+2]]
		}
	}
}
