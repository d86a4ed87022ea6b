package gpucheck

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
)

func TestSoftmaxVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 37, 1000 // cols > block: several elements per thread
	x, dy := randn(r, rows*cols, 3), randn(r, rows*cols, 1)
	dx, ddy := upload(t, d, x, rows, cols), upload(t, d, dy, rows, cols)
	y, g := alloc(t, d, cuda.Float32, rows, cols), alloc(t, d, cuda.Float32, rows, cols)
	if err := d.Softmax(y, dx); err != nil {
		t.Fatal(err)
	}
	if err := d.SoftmaxBackward(g, y, ddy); err != nil {
		t.Fatal(err)
	}
	wy, wg := make([]float64, rows*cols), make([]float64, rows*cols)
	for i := range rows {
		row := x[i*cols : (i+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, float64(v))
		}
		var s float64
		for j, v := range row {
			wy[i*cols+j] = math.Exp(float64(v) - m)
			s += wy[i*cols+j]
		}
		var dot float64
		for j := range row {
			wy[i*cols+j] /= s
			dot += wy[i*cols+j] * float64(dy[i*cols+j])
		}
		for j := range row {
			wg[i*cols+j] = wy[i*cols+j] * (float64(dy[i*cols+j]) - dot)
		}
	}
	check(t, "softmax", d, y, wy, tol32)
	check(t, "softmax backward", d, g, wg, tol32)
}

func TestLayerNormVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, cols, eps = 50, 384, 1e-5
	x, dy, gamma, beta := randn(r, rows*cols, 2), randn(r, rows*cols, 1), randn(r, cols, 1), randn(r, cols, 1)
	dx, ddy, dg, db := upload(t, d, x, rows, cols), upload(t, d, dy, rows, cols), upload(t, d, gamma, cols), upload(t, d, beta, cols)
	y, gx := alloc(t, d, cuda.Float32, rows, cols), alloc(t, d, cuda.Float32, rows, cols)
	ggamma, gbeta := alloc(t, d, cuda.Float32, cols), alloc(t, d, cuda.Float32, cols)
	s, err := d.LayerNorm(y, dx, dg, db, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	if err := d.LayerNormBackward(gx, ggamma, gbeta, ddy, dx, dg, s); err != nil {
		t.Fatal(err)
	}
	wy, wdx := make([]float64, rows*cols), make([]float64, rows*cols)
	wdg, wdb := make([]float64, cols), make([]float64, cols)
	for i := range rows {
		xs := f64(x[i*cols : (i+1)*cols])
		var mu, v float64
		for _, e := range xs {
			mu += e
		}
		mu /= cols
		for _, e := range xs {
			v += (e - mu) * (e - mu)
		}
		rs := 1 / math.Sqrt(v/cols+eps)
		var a, b float64
		for j, e := range xs {
			h := (e - mu) * rs
			wy[i*cols+j] = float64(gamma[j])*h + float64(beta[j])
			gj := float64(gamma[j]) * float64(dy[i*cols+j])
			a += gj
			b += gj * h
			wdg[j] += float64(dy[i*cols+j]) * h
			wdb[j] += float64(dy[i*cols+j])
		}
		a, b = a/cols, b/cols
		for j, e := range xs {
			h := (e - mu) * rs
			wdx[i*cols+j] = rs * (float64(gamma[j])*float64(dy[i*cols+j]) - a - h*b)
		}
	}
	check(t, "layer norm", d, y, wy, tol32)
	check(t, "layer norm dx", d, gx, wdx, tol32)
	check(t, "layer norm dgamma", d, ggamma, wdg, tol32)
	check(t, "layer norm dbeta", d, gbeta, wdb, tol32)
}

func TestBatchNormVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(9, 10))
	const n, c, h, w, eps, mom = 8, 16, 7, 7, 1e-5, 0.1
	hw := h * w
	x, dy, gamma, beta := randn(r, n*c*hw, 2), randn(r, n*c*hw, 1), randn(r, c, 1), randn(r, c, 1)
	rm0, rv0 := randn(r, c, 1), make([]float32, c)
	for i := range rv0 {
		rv0[i] = 1 + float32(i)/10
	}
	dx, ddy := upload(t, d, x, n, c, h, w), upload(t, d, dy, n, c, h, w)
	dg, db, rm, rv := upload(t, d, gamma, c), upload(t, d, beta, c), upload(t, d, rm0, c), upload(t, d, rv0, c)
	y, gx := alloc(t, d, cuda.Float32, n, c, h, w), alloc(t, d, cuda.Float32, n, c, h, w)
	gg, gb := alloc(t, d, cuda.Float32, c), alloc(t, d, cuda.Float32, c)
	s, err := d.BatchNormTrain(y, dx, dg, db, rm, rv, mom, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	if err := d.BatchNormBackward(gx, gg, gb, ddy, dx, dg, s, eps); err != nil {
		t.Fatal(err)
	}
	m := float64(n * hw)
	idx := func(i, ch, k int) int { return (i*c+ch)*hw + k }
	wy, wdx := make([]float64, n*c*hw), make([]float64, n*c*hw)
	wg, wb, wrm, wrv := make([]float64, c), make([]float64, c), make([]float64, c), make([]float64, c)
	for ch := range c {
		var mu, v float64
		for i := range n {
			for k := range hw {
				mu += float64(x[idx(i, ch, k)])
			}
		}
		mu /= m
		for i := range n {
			for k := range hw {
				e := float64(x[idx(i, ch, k)]) - mu
				v += e * e
			}
		}
		v /= m
		rs := 1 / math.Sqrt(v+eps)
		wrm[ch] = (1-mom)*float64(rm0[ch]) + mom*mu
		wrv[ch] = (1-mom)*float64(rv0[ch]) + mom*v*m/(m-1)
		var sdy, sdyh float64
		for i := range n {
			for k := range hw {
				j := idx(i, ch, k)
				hh := (float64(x[j]) - mu) * rs
				wy[j] = float64(gamma[ch])*hh + float64(beta[ch])
				sdy += float64(dy[j])
				sdyh += float64(dy[j]) * hh
			}
		}
		wg[ch], wb[ch] = sdyh, sdy
		for i := range n {
			for k := range hw {
				j := idx(i, ch, k)
				hh := (float64(x[j]) - mu) * rs
				wdx[j] = float64(gamma[ch]) * rs / m * (m*float64(dy[j]) - sdy - hh*sdyh)
			}
		}
	}
	check(t, "batch norm", d, y, wy, tol32)
	check(t, "batch norm running mean", d, rm, wrm, tol32)
	check(t, "batch norm running var", d, rv, wrv, tol32)
	check(t, "batch norm dx", d, gx, wdx, tol32)
	check(t, "batch norm dgamma", d, gg, wg, tol32)
	check(t, "batch norm dbeta", d, gb, wb, tol32)

	// Global average pooling and the row/column sums on the same data.
	pool, back := alloc(t, d, cuda.Float32, n, c), alloc(t, d, cuda.Float32, n, c, h, w)
	if err := d.GlobalAvgPool(pool, dx); err != nil {
		t.Fatal(err)
	}
	if err := d.GlobalAvgPoolBackward(back, pool); err != nil {
		t.Fatal(err)
	}
	wp, wback := make([]float64, n*c), make([]float64, n*c*hw)
	for i := range n * c {
		for k := range hw {
			wp[i] += float64(x[i*hw+k])
		}
		wp[i] /= float64(hw)
		for k := range hw {
			wback[i*hw+k] = wp[i] / float64(hw)
		}
	}
	check(t, "global avg pool", d, pool, wp, tol32)
	check(t, "global avg pool bwd", d, back, wback, tol32)
	rows, cols := n*c, hw
	mat := upload(t, d, x, rows, cols)
	sr, sc := alloc(t, d, cuda.Float32, rows), alloc(t, d, cuda.Float32, cols)
	if err := d.SumRows(sr, mat); err != nil {
		t.Fatal(err)
	}
	if err := d.SumCols(sc, mat); err != nil {
		t.Fatal(err)
	}
	wsr, wsc := make([]float64, rows), make([]float64, cols)
	for i := range rows {
		for j := range cols {
			wsr[i] += float64(x[i*cols+j])
			wsc[j] += float64(x[i*cols+j])
		}
	}
	check(t, "sum rows", d, sr, wsr, tol32)
	check(t, "sum cols", d, sc, wsc, tol32)
}
