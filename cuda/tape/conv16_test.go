package tape_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
)

// cuda's 16-bit convolution entry points, on the emulator (the cuda package's own tests run
// on a fake driver that launches no kernel): Conv2d16 and Conv2dBackward16 of operands
// already in 16 bits equal float32's Conv2d and Conv2dBackward of the same (rounded) values
// to summation order (1e-6 relative) with a float32 result, and that result rounded once to
// 16 bits with a 16-bit result (within one 16-bit ulp, for a sum that another order rounds
// the other way; on the emulator the orders agree and both are exact), through im2col and
// through cuDNN; RoundCast stores Round's bits twice.
func TestConv16MatchesFloat32(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	defer func() { _ = d.SetConvImpl(cuda.ConvAuto) }()
	const n, c, h, w, oc, k = 2, 3, 5, 5, 4, 3
	p := cuda.Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	oh, ow := p.OutSize(h, w, k, k)
	r := rand.New(rand.NewSource(1))
	draw := func(shape ...int) *cuda.Tensor {
		v := make([]float32, prodOf(shape))
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		tt, err := d.FromHost(v, shape...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Free)
		return tt
	}
	alloc := func(dt cuda.DType, shape ...int) *cuda.Tensor {
		tt, err := d.Alloc(dt, shape...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tt.Free)
		return tt
	}
	host := func(tt *cuda.Tensor) []float32 {
		if tt.DType() != cuda.Float32 {
			f := alloc(cuda.Float32, tt.Shape()...)
			if err := d.Cast(f, tt); err != nil {
				t.Fatal(err)
			}
			tt = f
		}
		v := make([]float32, tt.Len())
		if err := tt.CopyTo(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	x, wt, dy := draw(n, c, h, w), draw(oc, c, k, k), draw(n, oc, oh, ow)
	for _, f := range []struct {
		name string
		dt   cuda.DType
		fmt  cuda.Format
		ulp  float64
	}{{"bf16", cuda.BFloat16, cuda.BF16, 1.0 / 128}, {"fp16", cuda.Float16, cuda.FP16, 1.0 / 1024}} {
		// Rounded float32 values and their 16-bit copies, made by RoundCast.
		round := func(src *cuda.Tensor) (*cuda.Tensor, *cuda.Tensor) {
			r32, r16 := alloc(cuda.Float32, src.Shape()...), alloc(f.dt, src.Shape()...)
			if err := d.RoundCast(r32, r16, src); err != nil {
				t.Fatal(err)
			}
			want := alloc(cuda.Float32, src.Shape()...)
			if err := d.Round(want, src, f.fmt); err != nil {
				t.Fatal(err)
			}
			a, b, c := host(r32), host(r16), host(want)
			for i := range a {
				if a[i] != c[i] || b[i] != c[i] {
					t.Fatalf("%s: RoundCast element %d: %v (float32), %v (16-bit), Round gives %v", f.name, i, a[i], b[i], c[i])
				}
			}
			return r32, r16
		}
		x32, x16 := round(x)
		w32, w16 := round(wt)
		dy32, dy16 := round(dy)
		if err := d.SetConvImpl(cuda.ConvIm2col); err != nil {
			t.Fatal(err)
		}
		refY, refDx, refDw := alloc(cuda.Float32, n, oc, oh, ow), alloc(cuda.Float32, n, c, h, w), alloc(cuda.Float32, oc, c, k, k)
		if err := d.Conv2d(refY, x32, w32, p, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.Conv2dBackward(refDx, refDw, dy32, x32, w32, p, 0); err != nil {
			t.Fatal(err)
		}
		impls := []cuda.ConvImpl{cuda.ConvIm2col}
		if d.SetConvImpl(cuda.ConvCuDNN) == nil {
			impls = append(impls, cuda.ConvCuDNN)
		}
		for _, impl := range impls {
			if err := d.SetConvImpl(impl); err != nil {
				t.Fatal(err)
			}
			for _, outT := range []cuda.DType{cuda.Float32, f.dt} {
				tol := 1e-6
				if outT != cuda.Float32 {
					tol = f.ulp
				}
				y, dx, dw := alloc(outT, n, oc, oh, ow), alloc(outT, n, c, h, w), alloc(outT, oc, c, k, k)
				if err := d.Conv2d16(y, x16, w16, p); err != nil {
					t.Fatalf("%s %v %v: %v", f.name, impl, outT, err)
				}
				if err := d.Conv2dBackward16(dx, nil, dy16, dx, w16, p); err != nil {
					t.Fatalf("%s %v %v: dx: %v", f.name, impl, outT, err)
				}
				if err := d.Conv2dBackward16(nil, dw, dy16, x16, dw, p); err != nil {
					t.Fatalf("%s %v %v: dw: %v", f.name, impl, outT, err)
				}
				for _, cmp := range []struct {
					name      string
					got, want *cuda.Tensor
				}{{"y", y, refY}, {"dx", dx, refDx}, {"dw", dw, refDw}} {
					want := cmp.want
					if outT != cuda.Float32 { // the float32 result rounded once
						want = alloc(cuda.Float32, cmp.want.Shape()...)
						if err := d.Round(want, cmp.want, f.fmt); err != nil {
							t.Fatal(err)
						}
					}
					e := maxRel(host(cmp.got), host(want))
					t.Logf("%s, %v, %v result: %s within %.2g of float32's", f.name, impl, outT, cmp.name, e)
					if e > tol {
						t.Errorf("%s, %v, %v result: %s differs from float32's by %.2g (tolerance %.2g)", f.name, impl, outT, cmp.name, e, tol)
					}
				}
			}
		}
		// Mixed operand types are refused.
		if err := d.Conv2d16(alloc(cuda.Float32, n, oc, oh, ow), x16, w32, p); err == nil {
			t.Errorf("%s: Conv2d16 of a 16-bit x and a float32 w accepted", f.name)
		}
	}
}

func prodOf(s []int) int {
	p := 1
	for _, v := range s {
		p *= v
	}
	return p
}
