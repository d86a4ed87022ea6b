package gpucheck

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
)

// The transformer ops against a float64 CPU reference, to tol32 of the result's scale:
// row gather with padding entries and its scatter-add adjoint (with repeated indices, as the
// bias-table gradient), permutations of 2 to 5 dimensions, broadcast add and multiply, and
// the strided batched GEMM in all four transpositions with alpha and beta.
func TestIndexOpsVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(31, 32))
	const rows, row, out = 37, 13, 50
	x := randn(r, rows*row, 1)
	idx := make([]int32, out)
	for i := range idx {
		idx[i] = int32(r.IntN(rows+8)) - 4 // negative or past the end: zero rows; repeats
	}
	dx, didx := upload(t, d, x, rows, row), mustInt(t, d, idx)
	y := alloc(t, d, cuda.Float32, out, row)
	if err := d.GatherRows(y, dx, didx, row); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, out*row)
	for i, j := range idx {
		for k := 0; j >= 0 && int(j) < rows && k < row; k++ {
			want[i*row+k] = float64(x[int(j)*row+k])
		}
	}
	check(t, "gather rows", d, y, want, tol32)
	g := randn(r, out*row, 1)
	dg := upload(t, d, g, out, row)
	acc := randn(r, rows*row, 1)
	dacc := upload(t, d, acc, rows, row)
	if err := d.ScatterAddRows(dacc, dg, didx, row); err != nil {
		t.Fatal(err)
	}
	wantAcc := f64(acc)
	for i, j := range idx {
		for k := 0; j >= 0 && int(j) < rows && k < row; k++ {
			wantAcc[int(j)*row+k] += float64(g[i*row+k])
		}
	}
	check(t, "scatter-add rows", d, dacc, wantAcc, tol32)
	if err := d.GatherRows(y, dx, didx, row+1); err == nil {
		t.Error("gather rows accepted a row length that does not divide the input")
	}

	for _, c := range []struct {
		shape, perm []int
	}{{[]int{7, 11}, []int{1, 0}}, {[]int{3, 5, 6}, []int{0, 2, 1}}, {[]int{2, 3, 4, 5}, []int{0, 2, 1, 3}},
		{[]int{3, 4, 3, 2, 5}, []int{2, 0, 3, 1, 4}}, {[]int{4, 3, 2, 3, 5}, []int{1, 3, 0, 2, 4}}} {
		n := 1
		for _, s := range c.shape {
			n *= s
		}
		xs := randn(r, n, 1)
		px := upload(t, d, xs, c.shape...)
		ys := make([]int, len(c.shape))
		for o, p := range c.perm {
			ys[o] = c.shape[p]
		}
		py := alloc(t, d, cuda.Float32, ys...)
		if err := d.Permute(py, px, c.perm...); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("permute %v %v", c.shape, c.perm), d, py, permuteRef(xs, c.shape, c.perm), tol32)
	}

	const d0, d1, d2, d3 = 3, 4, 5, 6
	n := d0 * d1 * d2 * d3
	a, b := randn(r, n, 1), randn(r, d1*d3, 1)
	da, db := upload(t, d, a, n), upload(t, d, b, d1, d3)
	yb := alloc(t, d, cuda.Float32, n)
	for _, mul := range []bool{false, true} {
		wb := make([]float64, n)
		for e := range wb {
			v := float64(b[((e/(d2*d3))%d1)*d3+e%d3])
			if mul {
				wb[e] = float64(a[e]) * v
			} else {
				wb[e] = float64(a[e]) + v
			}
		}
		var err error
		if mul {
			err = d.MulBroadcast(yb, da, db, d1, d2, d3)
		} else {
			err = d.AddBroadcast(yb, da, db, d1, d2, d3)
		}
		if err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("broadcast mul=%v", mul), d, yb, wb, tol32)
	}

	const batch, m, nn, k = 5, 17, 9, 23
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		as, bs := []int{batch, m, k}, []int{batch, k, nn}
		if tr[0] {
			as = []int{batch, k, m}
		}
		if tr[1] {
			bs = []int{batch, nn, k}
		}
		av, bv, cv := randn(r, batch*m*k, 1), randn(r, batch*k*nn, 1), randn(r, batch*m*nn, 1)
		ga, gb, gc := upload(t, d, av, as...), upload(t, d, bv, bs...), upload(t, d, cv, batch, m, nn)
		if err := d.MatMulBatched(gc, ga, gb, tr[0], tr[1], 0.5, 2); err != nil {
			t.Fatal(err)
		}
		wc := make([]float64, 0, batch*m*nn)
		for i := range batch {
			p := gemmRef(tr[0], tr[1], m, nn, k, av[i*m*k:(i+1)*m*k], bv[i*k*nn:(i+1)*k*nn], func(v float32) float32 { return v })
			for j, v := range p {
				wc = append(wc, 0.5*v+2*float64(cv[i*m*nn+j]))
			}
		}
		check(t, fmt.Sprintf("batched sgemm t=%v", tr), d, gc, wc, tol32)
	}
}

func permuteRef(x []float32, shape, perm []int) []float64 {
	r := len(shape)
	stride := make([]int, r)
	s := 1
	for i := r - 1; i >= 0; i-- {
		stride[i] = s
		s *= shape[i]
	}
	out := make([]float64, len(x))
	idx := make([]int, r)
	for o := range out {
		rem := o
		for i := r - 1; i >= 0; i-- {
			dim := shape[perm[i]]
			idx[i] = rem % dim
			rem /= dim
		}
		src := 0
		for i := range r {
			src += idx[i] * stride[perm[i]]
		}
		out[o] = float64(x[src])
	}
	return out
}

func mustInt(t *testing.T, d *cuda.Device, v []int32) *cuda.Tensor {
	t.Helper()
	x, err := d.FromHostInt32(v, len(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Free)
	return x
}
