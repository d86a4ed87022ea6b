package transforms_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// ramp is a w×h image whose pixel (x, y) is (x, y, x+y): every output value says where it
// came from.
func ramp(w, h int) *rgb.Image {
	img := &rgb.Image{W: w, H: h, Pix: make([]uint8, 3*w*h)}
	for y := range h {
		for x := range w {
			i := 3 * (y*w + x)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2] = uint8(x), uint8(y), uint8(x+y)
		}
	}
	return img
}

// run applies p to img with a seeded generator and returns the un-normalised values ×255.
func run(t *testing.T, p *transforms.Pipeline, img *rgb.Image, seed uint64) (out []float64, w, h int) {
	t.Helper()
	var s transforms.Scratch
	dst := make([]float32, 3*64*64)
	w, h, err := p.RunImage(img, rand.New(rand.NewPCG(seed, 0)), &s, dst)
	if err != nil {
		t.Fatal(err)
	}
	out = make([]float64, 3*w*h)
	for i := range out {
		out[i] = float64(dst[i]) * 255
	}
	return out, w, h
}

// TestRandomCropPadding: RandomCrop(8, padding=2) of an 8×8 image is the image shifted by
// (dy, dx) in [-2, 2]² with black borders; over 200 draws every one of the 25 offsets occurs.
// Exact: no resampling happens.
func TestRandomCropPadding(t *testing.T) {
	img := ramp(8, 8)
	p, err := transforms.Compose(transforms.RandomCrop{Width: 8, Height: 8, Padding: 2}, transforms.ToTensor{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int]bool{}
	for seed := range uint64(200) {
		out, w, h := run(t, p, img, seed)
		if w != 8 || h != 8 {
			t.Fatalf("output %dx%d, want 8x8", w, h)
		}
		// Find the shift from a pixel that is inside the image for every shift: (4, 4).
		dx, dy := int(math.Round(out[4*8+4]))-4, int(math.Round(out[64+4*8+4]))-4
		if dx < -2 || dx > 2 || dy < -2 || dy > 2 {
			t.Fatalf("seed %d: shift (%d, %d) beyond the padding", seed, dx, dy)
		}
		seen[[2]int{dx, dy}] = true
		for y := range 8 {
			for x := range 8 {
				sx, sy := x+dx, y+dy
				want := [3]float64{}
				if sx >= 0 && sy >= 0 && sx < 8 && sy < 8 {
					want = [3]float64{float64(sx), float64(sy), float64(sx + sy)}
				}
				for c := range 3 {
					if got := out[c*64+y*8+x]; math.Abs(got-want[c]) > 1e-3 {
						t.Fatalf("seed %d: (%d,%d) channel %d = %v, want %v (shift %d,%d)", seed, x, y, c, got, want[c], dx, dy)
					}
				}
			}
		}
	}
	if len(seen) != 25 {
		t.Errorf("%d of the 25 shifts occurred in 200 draws", len(seen))
	}
}

// TestFlips: a vertical flip with P=1 reverses the rows, a horizontal one the columns, both
// compose with a crop (the crop is taken from the flipped image), and P=0 does nothing.
func TestFlips(t *testing.T) {
	img := ramp(6, 4)
	for _, tc := range []struct {
		name   string
		ts     []transforms.Transform
		w, h   int
		source func(x, y int) (sx, sy int)
	}{
		{"vflip", []transforms.Transform{transforms.RandomVerticalFlip{P: 1}}, 6, 4, func(x, y int) (int, int) { return x, 3 - y }},
		{"vflip p=0", []transforms.Transform{transforms.RandomVerticalFlip{P: 0}}, 6, 4, func(x, y int) (int, int) { return x, y }},
		{"both", []transforms.Transform{transforms.RandomVerticalFlip{P: 1}, transforms.RandomHorizontalFlip{P: 1}}, 6, 4,
			func(x, y int) (int, int) { return 5 - x, 3 - y }},
		// The top two rows of the flipped image are the source's bottom two, reversed.
		{"vflip then crop", []transforms.Transform{transforms.RandomVerticalFlip{P: 1}, transforms.CenterCrop{Width: 6, Height: 2}}, 6, 2,
			func(x, y int) (int, int) { return x, 2 - y }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := transforms.Compose(tc.ts...)
			if err != nil {
				t.Fatal(err)
			}
			out, w, h := run(t, p, img, 1)
			if w != tc.w || h != tc.h {
				t.Fatalf("output %dx%d, want %dx%d", w, h, tc.w, tc.h)
			}
			for y := range h {
				for x := range w {
					sx, sy := tc.source(x, y)
					if gx, gy := out[y*w+x], out[w*h+y*w+x]; math.Abs(gx-float64(sx)) > 1e-3 || math.Abs(gy-float64(sy)) > 1e-3 {
						t.Fatalf("(%d,%d) came from (%v,%v), want (%d,%d)", x, y, gx, gy, sx, sy)
					}
				}
			}
		})
	}
}

// TestColorJitter: each adjustment alone against its definition (torchvision's tensor
// functions) on a one-pixel-per-colour image; float32 round-off, so 1e-3 of 255.
func TestColorJitter(t *testing.T) {
	img := &rgb.Image{W: 2, H: 1, Pix: []uint8{150, 100, 90, 60, 80, 100}}
	px := func(out []float64, i int) [3]float64 { return [3]float64{out[i], out[2+i], out[4+i]} }
	for _, tc := range []struct {
		name string
		cj   transforms.ColorJitter
		// want maps the input pixels (0..1) and the factor drawn to the expected output.
		want func(in [2][3]float64, f float64) [2][3]float64
		// factor recovers the factor drawn from the first output pixel.
		factor func(in, out [3]float64) float64
	}{
		{"brightness", transforms.ColorJitter{Brightness: 0.4},
			func(in [2][3]float64, f float64) [2][3]float64 {
				var o [2][3]float64
				for i := range in {
					for c := range 3 {
						o[i][c] = min(1, in[i][c]*f)
					}
				}
				return o
			},
			func(in, out [3]float64) float64 { return out[0] / in[0] }},
		{"saturation", transforms.ColorJitter{Saturation: 0.5},
			func(in [2][3]float64, f float64) [2][3]float64 {
				var o [2][3]float64
				for i := range in {
					g := 0.299*in[i][0] + 0.587*in[i][1] + 0.114*in[i][2]
					for c := range 3 {
						o[i][c] = min(1, max(0, f*in[i][c]+(1-f)*g))
					}
				}
				return o
			},
			func(in, out [3]float64) float64 {
				g := 0.299*in[0] + 0.587*in[1] + 0.114*in[2]
				return (out[0] - g) / (in[0] - g)
			}},
		{"contrast", transforms.ColorJitter{Contrast: 0.5},
			func(in [2][3]float64, f float64) [2][3]float64 {
				var m float64
				for i := range in {
					m += (0.299*in[i][0] + 0.587*in[i][1] + 0.114*in[i][2]) / 2
				}
				var o [2][3]float64
				for i := range in {
					for c := range 3 {
						o[i][c] = min(1, max(0, f*in[i][c]+(1-f)*m))
					}
				}
				return o
			},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := transforms.Compose(tc.cj, transforms.ToTensor{})
			if err != nil {
				t.Fatal(err)
			}
			in := [2][3]float64{{150. / 255, 100. / 255, 90. / 255}, {60. / 255, 80. / 255, 100. / 255}}
			changed := false
			for seed := range uint64(20) {
				out, _, _ := run(t, p, img, seed)
				got := [2][3]float64{px(out, 0), px(out, 1)}
				for i := range got {
					for c := range 3 {
						got[i][c] /= 255
					}
				}
				var f float64
				if tc.factor != nil {
					f = tc.factor(in[0], got[0])
				} else { // contrast: from the two pixels' difference, which the mean cancels
					f = (got[0][0] - got[1][0]) / (in[0][0] - in[1][0])
				}
				if f < 0.5-1e-3 || f > 1.5+1e-3 {
					t.Fatalf("seed %d: factor %v outside its range", seed, f)
				}
				changed = changed || math.Abs(f-1) > 1e-2
				want := tc.want(in, f)
				for i := range want {
					for c := range 3 {
						if math.Abs(got[i][c]-want[i][c]) > 1e-3 {
							t.Fatalf("seed %d (factor %.4f): pixel %d channel %d = %.5f, want %.5f", seed, f, i, c, got[i][c], want[i][c])
						}
					}
				}
			}
			if !changed {
				t.Error("20 draws left the image as it was")
			}
		})
	}
}

// TestColorJitterHue: a hue shift keeps HSV's value and saturation (pure red stays a pure
// colour of full value), and a hue past half a turn is refused.
func TestColorJitterHue(t *testing.T) {
	img := &rgb.Image{W: 1, H: 1, Pix: []uint8{255, 0, 0}}
	p, err := transforms.Compose(transforms.ColorJitter{Hue: 0.5}, transforms.ToTensor{})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(20) {
		out, _, _ := run(t, p, img, seed)
		r, g, b := out[0]/255, out[1]/255, out[2]/255
		if math.Abs(max(r, g, b)-1) > 1e-4 || math.Abs(min(r, g, b)) > 1e-4 {
			t.Fatalf("seed %d: red became (%.3f %.3f %.3f): value or saturation changed", seed, r, g, b)
		}
	}
	if _, err := transforms.Compose(transforms.ColorJitter{Hue: 0.6}); err == nil {
		t.Error("hue 0.6 accepted")
	}
}
