package gpucheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
)

// convRef is a direct float64 convolution with its input and weight gradients; round
// emulates autocast's rounding of the operands.
func convRef(x, w, dy []float32, n, c, h, wd, oc, kh, kw int, p cuda.Conv2dParams, round func(float32) float32) (y, dx, dw []float64) {
	oh, ow := p.OutSize(h, wd, kh, kw)
	s, d := max(p.StrideH, 1), max(p.DilH, 1)
	y, dx, dw = make([]float64, n*oc*oh*ow), make([]float64, n*c*h*wd), make([]float64, oc*c*kh*kw)
	for b := range n {
		for o := range oc {
			for oy := range oh {
				for ox := range ow {
					yi := ((b*oc+o)*oh+oy)*ow + ox
					for ch := range c {
						for i := range kh {
							for j := range kw {
								iy, ix := oy*s-p.PadH+i*d, ox*s-p.PadW+j*d
								if iy < 0 || iy >= h || ix < 0 || ix >= wd {
									continue
								}
								xi, wi := ((b*c+ch)*h+iy)*wd+ix, ((o*c+ch)*kh+i)*kw+j
								y[yi] += float64(round(x[xi])) * float64(round(w[wi]))
								dx[xi] += float64(round(dy[yi])) * float64(round(w[wi]))
								dw[wi] += float64(round(dy[yi])) * float64(round(x[xi]))
							}
						}
					}
				}
			}
		}
	}
	return y, dx, dw
}

// TestConvVsCPU checks both implementations: cuDNN (when it loads; it is optional) and
// im2col with cuBLAS. im2col's float32 results are plain float32 GEMMs (1e-5); cuDNN may pick
// Winograd or FFT algorithms, whose float32 error is larger (1e-4, as PyTorch's own
// convolution tests allow).
func TestConvVsCPU(t *testing.T) {
	d := device(t)
	defer d.SetConvImpl(cuda.ConvAuto)
	for _, impl := range []struct {
		impl  cuda.ConvImpl
		tol32 float64
	}{{cuda.ConvCuDNN, 1e-4}, {cuda.ConvIm2col, tol32}} {
		if err := d.SetConvImpl(impl.impl); err != nil {
			t.Logf("skipping %v: %v", impl.impl, err)
			continue
		}
		t.Run(impl.impl.String(), func(t *testing.T) { convVsCPU(t, d, impl.tol32) })
	}
}

func convVsCPU(t *testing.T, d *cuda.Device, tol32 float64) {
	r := rand.New(rand.NewPCG(15, 16))
	cases := []struct {
		n, c, h, w, oc, k int
		p                 cuda.Conv2dParams
	}{
		{2, 3, 15, 15, 8, 7, cuda.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 3, PadW: 3}}, // resnet stem
		{3, 16, 8, 8, 16, 3, cuda.Conv2dParams{PadH: 1, PadW: 1}},
		{2, 16, 8, 8, 32, 1, cuda.Conv2dParams{StrideH: 2, StrideW: 2}}, // downsample
		{1, 4, 9, 9, 4, 3, cuda.Conv2dParams{PadH: 2, PadW: 2, DilH: 2, DilW: 2}},
	}
	for _, tc := range cases {
		oh, ow := tc.p.OutSize(tc.h, tc.w, tc.k, tc.k)
		x, w, dy := randn(r, tc.n*tc.c*tc.h*tc.w, 1), randn(r, tc.oc*tc.c*tc.k*tc.k, 0.2), randn(r, tc.n*tc.oc*oh*ow, 1)
		dX, dW, dDY := upload(t, d, x, tc.n, tc.c, tc.h, tc.w), upload(t, d, w, tc.oc, tc.c, tc.k, tc.k), upload(t, d, dy, tc.n, tc.oc, oh, ow)
		y, gx, gw := alloc(t, d, cuda.Float32, tc.n, tc.oc, oh, ow), alloc(t, d, cuda.Float32, tc.n, tc.c, tc.h, tc.w), alloc(t, d, cuda.Float32, tc.oc, tc.c, tc.k, tc.k)
		for _, m := range []struct {
			dt  cuda.DType
			f   amp.Format
			tol float64
		}{{cuda.Float32, 0, tol32}, {cuda.BFloat16, amp.BF16, tol16}, {cuda.Float16, amp.FP16, tol16}} {
			round := func(v float32) float32 { return v }
			if m.dt != cuda.Float32 {
				round = func(v float32) float32 { return amp.Round32(m.f, v) }
			}
			wy, wdx, wdw := convRef(x, w, dy, tc.n, tc.c, tc.h, tc.w, tc.oc, tc.k, tc.k, tc.p, round)
			if err := d.Conv2d(y, dX, dW, tc.p, m.dt); err != nil {
				t.Fatal(err)
			}
			if err := d.Conv2dBackward(gx, gw, dDY, dX, dW, tc.p, m.dt); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("conv %dx%d %+v %v", tc.k, tc.k, tc.p, m.dt)
			check(t, name+" y", d, y, wy, m.tol)
			check(t, name+" dx", d, gx, wdx, m.tol)
			check(t, name+" dw", d, gw, wdw, m.tol)
		}
	}
}

func TestMaxPoolAndCrossEntropyVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(17, 18))
	const n, c, h, w = 2, 3, 9, 9
	p := cuda.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	oh, ow := p.OutSize(h, w, 3, 3)
	x, dy := randn(r, n*c*h*w, 1), randn(r, n*c*oh*ow, 1)
	dX, dDY := upload(t, d, x, n, c, h, w), upload(t, d, dy, n, c, oh, ow)
	y, gx := alloc(t, d, cuda.Float32, n, c, oh, ow), alloc(t, d, cuda.Float32, n, c, h, w)
	arg, err := d.MaxPool2d(y, dX, 3, 3, p)
	if err != nil {
		t.Fatal(err)
	}
	defer arg.Free()
	if err := d.MaxPool2dBackward(gx, dDY, arg); err != nil {
		t.Fatal(err)
	}
	wy, wdx := make([]float64, n*c*oh*ow), make([]float64, n*c*h*w)
	for nc := range n * c {
		for oy := range oh {
			for ox := range ow {
				best, bi := math.Inf(-1), -1
				for i := range 3 {
					for j := range 3 {
						iy, ix := oy*2-1+i, ox*2-1+j
						if iy >= 0 && iy < h && ix >= 0 && ix < w && float64(x[(nc*h+iy)*w+ix]) > best {
							best, bi = float64(x[(nc*h+iy)*w+ix]), (nc*h+iy)*w+ix
						}
					}
				}
				wy[(nc*oh+oy)*ow+ox] = best
				wdx[bi] += float64(dy[(nc*oh+oy)*ow+ox])
			}
		}
	}
	check(t, "max pool", d, y, wy, tol32)
	check(t, "max pool backward", d, gx, wdx, tol32)

	const rows, classes = 16, 1000
	logits := randn(r, rows*classes, 3)
	labels := randLabels(r, rows, classes)
	dl, err := d.FromHostInt32(labels, rows)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Free()
	dLogits := upload(t, d, logits, rows, classes)
	loss, grad := alloc(t, d, cuda.Float32, rows), alloc(t, d, cuda.Float32, rows, classes)
	prob, err := d.CrossEntropy(loss, dLogits, dl)
	if err != nil {
		t.Fatal(err)
	}
	defer prob.Free()
	if err := d.CrossEntropyBackward(grad, prob, dl, 1.0/rows); err != nil {
		t.Fatal(err)
	}
	wl, wg := make([]float64, rows), make([]float64, rows*classes)
	for i := range rows {
		row := f64(logits[i*classes : (i+1)*classes])
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		wl[i] = math.Log(s) + m - row[labels[i]]
		for j, v := range row {
			wg[i*classes+j] = math.Exp(v-m) / s / rows
			if j == int(labels[i]) {
				wg[i*classes+j] -= 1.0 / rows
			}
		}
	}
	check(t, "cross entropy", d, loss, wl, tol32)
	check(t, "cross entropy backward", d, grad, wg, tol32)
}
