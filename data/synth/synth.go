// Package synth writes learnable synthetic ImageFolder trees of JPEGs: each class is a shape in a
// colour, drawn with random position, size, rotation, background and noise, deterministic by seed.
package synth

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data/rgb"
)

// NumShapes is the number of distinct shapes; class k draws shape k mod NumShapes in hue
// k*golden-ratio mod 1, so every class differs from every other in shape or colour.
const NumShapes = 6

// ClassName is the folder name of class k ("class_000"), which sorts in class order.
func ClassName(k int) string { return fmt.Sprintf("class_%03d", k) }

// WriteImageFolder writes classes×perClass size×size JPEGs to dir/<ClassName(k)>/<i>.jpg. The
// same arguments always give the same bytes.
func WriteImageFolder(dir string, classes, perClass, size int, seed uint64) error {
	if classes <= 0 || perClass < 0 || size < 8 {
		return fmt.Errorf("synth: need classes > 0, perClass >= 0, size >= 8 (got %d, %d, %d)", classes, perClass, size)
	}
	var img rgb.Image
	var buf bytes.Buffer
	for k := 0; k < classes; k++ {
		cdir := filepath.Join(dir, ClassName(k))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
		for i := 0; i < perClass; i++ {
			Draw(&img, k, size, rand.New(rand.NewPCG(seed, uint64(k)<<32|uint64(i))))
			buf.Reset()
			if err := rgb.EncodeJPEG(&buf, &img, 92); err != nil {
				return fmt.Errorf("synth: encode class %d image %d: %w", k, i, err)
			}
			p := filepath.Join(cdir, fmt.Sprintf("%05d.jpg", i))
			if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
		}
	}
	return nil
}

// WriteSplit writes dir/train (trainPer images per class) and dir/val (valPer per class), drawn
// from independent seeds so no validation image repeats a training image.
func WriteSplit(dir string, classes, trainPer, valPer, size int, seed uint64) error {
	if err := WriteImageFolder(filepath.Join(dir, "train"), classes, trainPer, size, seed); err != nil {
		return err
	}
	return WriteImageFolder(filepath.Join(dir, "val"), classes, valPer, size, seed^0xa5a5a5a5deadbeef)
}

// Draw renders one image of class k into img (size×size) using rng.
func Draw(img *rgb.Image, k, size int, rng *rand.Rand) {
	img.Resize(size, size)
	// Background: a dim, low-saturation two-colour gradient.
	b0 := hsv(rng.Float64(), 0.25*rng.Float64(), 0.2+0.5*rng.Float64())
	b1 := hsv(rng.Float64(), 0.25*rng.Float64(), 0.2+0.5*rng.Float64())
	angle := rng.Float64() * 2 * math.Pi
	ca, sa := math.Cos(angle), math.Sin(angle)
	// The class's object.
	hue := math.Mod(float64(k)*0.6180339887+0.05*(rng.Float64()-0.5), 1)
	if hue < 0 {
		hue++
	}
	fg := hsv(hue, 0.65+0.3*rng.Float64(), 0.7+0.3*rng.Float64())
	fsize := float64(size)
	r := fsize * (0.2 + 0.12*rng.Float64())
	cx := fsize * (0.5 + 0.3*(rng.Float64()-0.5))
	cy := fsize * (0.5 + 0.3*(rng.Float64()-0.5))
	rot := rng.Float64() * 2 * math.Pi
	shape := k % NumShapes
	// A distractor blob of a random colour.
	dc := hsv(rng.Float64(), 0.5*rng.Float64(), rng.Float64())
	dx, dy, dr := fsize*rng.Float64(), fsize*rng.Float64(), fsize*(0.05+0.08*rng.Float64())
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			px, py := float64(x)+0.5, float64(y)+0.5
			t := ((px/fsize-0.5)*ca+(py/fsize-0.5)*sa)*0.7 + 0.5
			c := mix(b0, b1, t)
			if (px-dx)*(px-dx)+(py-dy)*(py-dy) < dr*dr {
				c = dc
			}
			if inside(shape, (px-cx)/r, (py-cy)/r, rot) {
				c = fg
			}
			o := (y*size + x) * 3
			for ch := 0; ch < 3; ch++ {
				v := c[ch] + 24*(rng.Float64()-0.5)
				img.Pix[o+ch] = uint8(max(0, min(255, math.Round(v))))
			}
		}
	}
}

// inside tests a point in units of the shape's radius, rotated by rot.
func inside(shape int, x, y, rot float64) bool {
	c, s := math.Cos(rot), math.Sin(rot)
	u, v := x*c+y*s, -x*s+y*c
	switch shape {
	case 0: // disk
		return x*x+y*y < 1
	case 1: // square
		return math.Abs(u) < 0.8 && math.Abs(v) < 0.8
	case 2: // triangle
		return v > -0.5 && v < 1-math.Abs(u)*1.7 && math.Abs(u) < 1
	case 3: // ring
		d := x*x + y*y
		return d < 1 && d > 0.4
	case 4: // cross
		return (math.Abs(u) < 0.3 && math.Abs(v) < 1) || (math.Abs(v) < 0.3 && math.Abs(u) < 1)
	default: // a diamond, stretched along one axis
		return math.Abs(u)/0.6+math.Abs(v) < 1
	}
}

func hsv(h, s, v float64) [3]float64 {
	i := math.Floor(h * 6)
	f := h*6 - i
	p, q, t := v*(1-s), v*(1-f*s), v*(1-(1-f)*s)
	var r, g, b float64
	switch int(i) % 6 {
	case 0:
		r, g, b = v, t, p
	case 1:
		r, g, b = q, v, p
	case 2:
		r, g, b = p, v, t
	case 3:
		r, g, b = p, q, v
	case 4:
		r, g, b = t, p, v
	default:
		r, g, b = v, p, q
	}
	return [3]float64{255 * r, 255 * g, 255 * b}
}

func mix(a, b [3]float64, t float64) [3]float64 {
	t = max(0, min(1, t))
	return [3]float64{a[0] + (b[0]-a[0])*t, a[1] + (b[1]-a[1])*t, a[2] + (b[2]-a[2])*t}
}
