package transforms_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/data/internal/fixture"
	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

func loadSrc(t *testing.T) (*fixture.Fixtures, *rgb.Image) {
	t.Helper()
	fx, err := fixture.Load()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(fixture.Dir(), "img", "src.png"))
	if err != nil {
		t.Fatal(err)
	}
	var img rgb.Image
	if err := rgb.Decode(data, &img); err != nil {
		t.Fatal(err)
	}
	return fx, &img
}

// toU8 recovers 8-bit values from an un-normalized CHW output (v/255 in float32) as HWC bytes.
func toU8(chw []float32, w, h int) []byte {
	out := make([]byte, 3*w*h)
	for c := 0; c < 3; c++ {
		for i := 0; i < w*h; i++ {
			out[i*3+c] = byte(math.Round(float64(chw[c*w*h+i]) * 255))
		}
	}
	return out
}

// TestResizeMatchesTorchvision: crop+resize (bilinear, antialias), flip, Resize(shorter side) +
// CenterCrop and a zero-padded CenterCrop against torchvision 0.14 on PIL 9.4. Tolerance: zero,
// the resampler is Pillow's fixed-point algorithm.
func TestResizeMatchesTorchvision(t *testing.T) {
	fx, img := loadSrc(t)
	var s transforms.Scratch
	for _, c := range fx.Resize {
		t.Run(c.Name, func(t *testing.T) {
			var p *transforms.Pipeline
			var err error
			pl := transforms.NewPlan(img.W, img.H)
			switch {
			case c.Crop != nil:
				p, err = transforms.Compose(transforms.ToTensor{})
				pl.Crop(c.Crop[0], c.Crop[1], c.Crop[2], c.Crop[3])
				if err == nil {
					err = pl.ResizeTo(c.Out[0], c.Out[1])
				}
				pl.Flip = c.Flip
			case c.Resize > 0:
				p, err = transforms.Compose(transforms.Resize{Width: c.Resize}, transforms.CenterCrop{Width: c.Center, Height: c.Center})
				if err == nil {
					pl, err = p.Plan(img.W, img.H, nil)
				}
			default:
				p, err = transforms.Compose(transforms.CenterCrop{Width: c.CenterHW[1], Height: c.CenterHW[0]})
				if err == nil {
					pl, err = p.Plan(img.W, img.H, nil)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			w, h := pl.Size()
			dst := make([]float32, 3*w*h)
			if _, _, err := p.Execute(img, pl, &s, dst); err != nil {
				t.Fatal(err)
			}
			got := toU8(dst, w, h)
			if len(got) != len(c.RGB) {
				t.Fatalf("output %dx%d has %d bytes, torchvision %d", w, h, len(got), len(c.RGB))
			}
			for i := range got {
				if got[i] != c.RGB[i] {
					t.Fatalf("byte %d (pixel %d, channel %d) = %d, torchvision %d", i, i/3, i%3, got[i], c.RGB[i])
				}
			}
		})
	}
}

// TestNormalizeMatchesTorch: ToTensor+Normalize in float32, bit for bit.
func TestNormalizeMatchesTorch(t *testing.T) {
	fx, img := loadSrc(t)
	n := fx.Normalized
	p, err := transforms.Compose(transforms.ToTensor{}, transforms.Normalize{Mean: transforms.ImageNetMean, Std: transforms.ImageNetStd})
	if err != nil {
		t.Fatal(err)
	}
	pl := transforms.NewPlan(img.W, img.H)
	pl.Crop(n.Crop[0], n.Crop[1], n.Crop[2], n.Crop[3])
	if err := pl.ResizeTo(n.Out[0], n.Out[1]); err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 3*n.Out[0]*n.Out[1])
	if _, _, err := p.Execute(img, pl, &transforms.Scratch{}, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst {
		want := math.Float32frombits(binary.LittleEndian.Uint32(n.F32[4*i:]))
		if v != want {
			t.Fatalf("element %d = %v, torch %v", i, v, want)
		}
	}
}

func TestRandomResizedCropParams(t *testing.T) {
	rrc := transforms.NewRandomResizedCrop(224)
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 2000; k++ {
		w, h := 50+rng.IntN(600), 50+rng.IntN(600)
		top, left, ch, cw := rrc.Params(w, h, rng)
		if ch <= 0 || cw <= 0 || top < 0 || left < 0 || top+ch > h || left+cw > w {
			t.Fatalf("%dx%d: crop top %d left %d %dx%d outside the image", w, h, top, left, cw, ch)
		}
	}
	// A 1000x10 strip defeats all ten tries; torchvision falls back to the widest centred crop
	// of ratio max(ratio): h = 10, w = round(10*4/3) = 13.
	top, left, ch, cw := rrc.Params(1000, 10, rng)
	if top != 0 || ch != 10 || cw != 13 || left != (1000-13)/2 {
		t.Errorf("fallback = top %d left %d h %d w %d", top, left, ch, cw)
	}
	top, left, ch, cw = rrc.Params(10, 1000, rng)
	if left != 0 || cw != 10 || ch != 13 || top != (1000-13)/2 {
		t.Errorf("tall fallback = top %d left %d h %d w %d", top, left, ch, cw)
	}
}

func TestComposeErrors(t *testing.T) {
	if _, err := transforms.Compose(transforms.Resize{Width: 10}, transforms.Resize{Width: 5}); err == nil {
		t.Error("two resizes: want ErrCompose")
	}
	if _, err := transforms.Compose(transforms.Normalize{}, transforms.ToTensor{}); err == nil {
		t.Error("Normalize not last: want ErrCompose")
	}
	p := transforms.Train(224)
	if w, h, ok := p.OutSize(); !ok || w != 224 || h != 224 {
		t.Errorf("Train(224).OutSize = %d, %d, %v", w, h, ok)
	}
	q, err := transforms.Compose(transforms.Resize{Width: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := q.OutSize(); ok {
		t.Error("Resize(10) alone has no static output size")
	}
}

// TestDCTScaling: the scaled decode stays close to the exact path (mean absolute error in 0..255
// levels below 3 on a smooth image).
func TestDCTScaling(t *testing.T) {
	src := rgb.Image{}
	src.Resize(400, 300)
	for y := 0; y < 300; y++ {
		for x := 0; x < 400; x++ {
			o := (y*400 + x) * 3
			src.Pix[o], src.Pix[o+1], src.Pix[o+2] = uint8(x*255/400), uint8(y*255/300), uint8((x+y)%256)
		}
	}
	var buf = new(bytesBuffer)
	if err := rgb.EncodeJPEG(&buf.Buffer, &src, 95); err != nil {
		t.Fatal(err)
	}
	p, _ := transforms.Compose(transforms.Resize{Width: 32, Height: 32})
	exact := make([]float32, 3*32*32)
	fast := make([]float32, 3*32*32)
	var s transforms.Scratch
	if _, _, err := p.Run(buf.Bytes(), nil, &s, exact); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.WithDCTScaling(true).Run(buf.Bytes(), nil, &s, fast); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for i := range exact {
		sum += math.Abs(float64(exact[i]-fast[i])) * 255
	}
	if mean := sum / float64(len(exact)); mean > 3 {
		t.Errorf("DCT-scaled mean difference %.2f levels > 3", mean)
	}
}

type bytesBuffer struct{ bytes.Buffer }
