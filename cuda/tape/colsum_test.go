package tape_test

import (
	"context"
	"math"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
)

// TestSumAxisColumnSplit: SumAxis over many rows, which splits the columns' sums over blocks of row lanes
// (column sums: Swin's bias gradient over 200,704 rows), equals the float64 sum within 1e-6 of
// the sum of |x| (float32 partial sums of 8 lanes and chunks, added in a fixed order).
func TestSumAxisColumnSplit(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(1))
	for _, c := range []struct{ outer, k, inner int }{{1, 5000, 40}, {3, 3000, 7}, {1, 200, 96}, {2, 20000, 5}, {1, 50, 3}} {
		x := make([]float32, c.outer*c.k*c.inner)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		xt, _ := d.FromHost(x, len(x))
		yt, _ := d.Alloc(cuda.Float32, c.outer*c.inner)
		if err := d.SumAxis(yt, xt, c.outer, c.k, c.inner); err != nil {
			t.Fatal(err)
		}
		y, _ := yt.ToHost(ctx)
		worst := 0.0
		for o := 0; o < c.outer; o++ {
			for i := 0; i < c.inner; i++ {
				var s, a float64
				for j := 0; j < c.k; j++ {
					v := float64(x[(o*c.k+j)*c.inner+i])
					s += v
					a += math.Abs(v)
				}
				worst = math.Max(worst, math.Abs(float64(y[o*c.inner+i])-s)/a)
			}
		}
		t.Logf("sum axis %v: within %.1e of float64 (relative to sum |x|)", c, worst)
		if worst > 1e-6 {
			t.Errorf("sum axis %v: %.1e", c, worst)
		}
	}
	for _, c := range []struct{ rows, cols int }{{5000, 40}, {4000, 96}, {300, 8}} {
		r, m := c.rows, c.cols
		x, dy := make([]float32, r*m), make([]float32, r*m)
		for i := range x {
			x[i], dy[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		gamma := make([]float32, m)
		for i := range gamma {
			gamma[i] = 1 + float32(i)/10
		}
		xt, _ := d.FromHost(x, r, m)
		dyt, _ := d.FromHost(dy, r, m)
		gt, _ := d.FromHost(gamma, m)
		yt, _ := d.Alloc(cuda.Float32, r, m)
		sv, err := d.LayerNorm(yt, xt, gt, nil, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		mean, _ := sv.Mean.ToHost(ctx)
		rstd, _ := sv.Rstd.ToHost(ctx)
		dx, _ := d.Alloc(cuda.Float32, r, m)
		dg, _ := d.Alloc(cuda.Float32, m)
		db, _ := d.Alloc(cuda.Float32, m)
		if err := d.LayerNormBackward(dx, dg, db, dyt, xt, gt, sv); err != nil {
			t.Fatal(err)
		}
		g, _ := dg.ToHost(ctx)
		b, _ := db.ToHost(ctx)
		worst := 0.0
		for j := 0; j < m; j++ {
			var sg, sb, ag, ab float64
			for i := 0; i < r; i++ {
				k := i*m + j
				v := float64(dy[k]) * (float64(x[k]) - float64(mean[i])) * float64(rstd[i])
				sg += v
				ag += math.Abs(v)
				sb += float64(dy[k])
				ab += math.Abs(float64(dy[k]))
			}
			worst = math.Max(worst, math.Max(math.Abs(float64(g[j])-sg)/ag, math.Abs(float64(b[j])-sb)/ab))
		}
		t.Logf("layer norm params %v: within %.1e of float64", c, worst)
		if worst > 1e-6 {
			t.Errorf("layer norm params %v: %.1e", c, worst)
		}
	}
}
