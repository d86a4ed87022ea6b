package cuda

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

func open(t *testing.T) *Device {
	t.Helper()
	cudatest.Require(t)
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func TestOpenWithoutCgo(t *testing.T) {
	if dl.Available {
		t.Skip("built with cgo")
	}
	_, err := Open(0)
	if err == nil || !strings.Contains(err.Error(), "built without cgo") {
		t.Fatalf("Open: %v", err)
	}
}

// On the fake driver: every kernel of the PTX is found at Open (the fake checks .entry
// names), tensors round-trip through pinned memory, the allocator reuses blocks, and every
// op launches with valid arguments. (The fake does not run kernels: cuda/gpucheck compares
// their results with the CPU on a GPU.)
func TestOpsOnFakeDriver(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	x, err := d.FromHost([]float32{1, -2, 3, -4, 5, -6}, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := x.ToHost(ctx)
	if err != nil || got[5] != -6 {
		t.Fatalf("round trip %v %v", got, err)
	}
	y, _ := d.Alloc(Float32, 2, 3)
	h, _ := d.Alloc(BFloat16, 2, 3)
	for name, err := range map[string]error{
		"fill": d.Fill(y, 1), "add": d.Add(y, x, x), "sub": d.Sub(y, x, x), "mul": d.Mul(y, x, x),
		"scale": d.Scale(y, x, 2), "axpby": d.Axpby(y, x, 1, 1), "relu": d.ReLU(y, x), "relu bwd": d.ReLUBackward(y, x, x),
		"gelu": d.GELU(y, x), "gelu bwd": d.GELUBackward(y, x, x), "round": d.Round(y, x, BF16), "round16": d.Round(y, x, FP16),
		"cast": d.Cast(h, x), "cast back": d.Cast(y, h), "softmax": d.Softmax(y, x), "softmax bwd": d.SoftmaxBackward(y, x, x),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := d.Add(y, x, h); err == nil {
		t.Error("add of mixed dtypes accepted")
	}
	s, err := d.LayerNorm(y, x, nil, nil, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := d.FromHost([]float32{1, 1, 1}, 3)
	if err := d.LayerNormBackward(y, g, g, x, x, g, s); err != nil {
		t.Fatal(err)
	}
	s.Free()
	img, _ := d.Alloc(Float32, 2, 3, 2, 2)
	dimg, _ := d.Alloc(Float32, 2, 3, 2, 2)
	bs, err := d.BatchNormTrain(img, img, g, g, g, g, 0.1, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.BatchNormBackward(dimg, g, g, img, img, g, bs, 1e-5); err != nil {
		t.Fatal(err)
	}
	if err := d.GlobalAvgPool(y, img); err != nil {
		t.Fatal(err)
	}
	if err := d.GlobalAvgPoolBackward(dimg, y); err != nil {
		t.Fatal(err)
	}
	if _, err := d.BatchNormTrain(y, y, g, g, g, g, 0.1, 1e-5); err == nil {
		t.Error("batch norm of a 2-D tensor accepted")
	}
	if n, err := d.NonFinite(ctx, x); err != nil || n != 0 {
		t.Fatalf("NonFinite = %d, %v", n, err)
	}
	before := d.MemoryStats()
	for _, tt := range []*Tensor{x, y, h, g, img, dimg} {
		tt.Free()
	}
	bs.Free()
	pin, err := d.Pinned(24)
	if err != nil {
		t.Fatal(err)
	}
	copy(pin.Float32s(), []float32{1, 2, 3, 4, 5, 6})
	z, _ := d.Alloc(Float32, 2, 3)
	if err := pin.CopyTo(z); err != nil {
		t.Fatal(err)
	}
	if v, err := z.ToHost(ctx); err != nil || v[5] != 6 {
		t.Fatalf("pinned copy: %v %v", v, err)
	}
	pin.Free()
	if st := d.MemoryStats(); st.Hits <= before.Hits {
		t.Errorf("allocator did not reuse a block: %+v", st)
	}
	z.Free()
}

// MatMul through the fake cuBLAS computes real products (the fake's device memory is host
// memory), so the shape checks and the row-major mapping are tested end to end.
func TestMatMulOnFake(t *testing.T) {
	d := open(t)
	a, _ := d.FromHost([]float32{1, 2, 3, 4, 5, 6}, 2, 3)  // 2x3
	b, _ := d.FromHost([]float32{1, 0, 0, 1, 1, 1}, 3, 2)  // 3x2
	bt, _ := d.FromHost([]float32{1, 0, 1, 0, 1, 1}, 2, 3) // b transposed
	c, _ := d.Alloc(Float32, 2, 2)
	for _, tc := range []struct {
		b      *Tensor
		transB bool
	}{{b, false}, {bt, true}} {
		if err := d.MatMul(c, a, tc.b, false, tc.transB, 1, 0); err != nil {
			t.Fatal(err)
		}
		got, _ := c.ToHost(context.Background())
		if want := []float32{4, 5, 10, 11}; !equal(got, want) {
			t.Fatalf("transB=%v: %v, want %v", tc.transB, got, want)
		}
	}
	if err := d.MatMul(c, a, a, false, false, 1, 0); err == nil {
		t.Fatal("2x3 · 2x3 accepted")
	}
	// The fake's 16-bit GEMM reads what the cast kernels wrote; without the kernel
	// emulator they do not run, so only the call path is checked here.
	if err := d.MatMulAutocast(c, a, b, false, false, BF16); err != nil {
		t.Fatal(err)
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Conv2d and its backward through the fake cuDNN (which computes on host memory): the
// descriptors, algorithm choice (the fake offers an over-sized algorithm first), workspace
// and argument order give the direct convolution; SetConvImpl switches implementations.
func TestConvCuDNNOnFake(t *testing.T) {
	d := open(t)
	if impl, err := d.ConvImplInUse(); impl != ConvCuDNN {
		t.Fatalf("ConvImplInUse = %v, %v; want cudnn with the fake library", impl, err)
	}
	const n, c, h, w, k, kh = 2, 3, 5, 5, 4, 3
	p := Conv2dParams{StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	oh, ow := p.OutSize(h, w, kh, kh)
	xs, ws, dys := make([]float32, n*c*h*w), make([]float32, k*c*kh*kh), make([]float32, n*k*oh*ow)
	for i := range xs {
		xs[i] = float32(i%7) - 3
	}
	for i := range ws {
		ws[i] = float32(i%5) * 0.5
	}
	for i := range dys {
		dys[i] = float32(i%3) - 1
	}
	x, _ := d.FromHost(xs, n, c, h, w)
	wt, _ := d.FromHost(ws, k, c, kh, kh)
	dy, _ := d.FromHost(dys, n, k, oh, ow)
	y, _ := d.Alloc(Float32, n, k, oh, ow)
	dx, _ := d.Alloc(Float32, n, c, h, w)
	dw, _ := d.Alloc(Float32, k, c, kh, kh)
	if err := d.Conv2d(y, x, wt, p, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Conv2dBackward(dx, dw, dy, x, wt, p, 0); err != nil {
		t.Fatal(err)
	}
	wy, wdx, wdw := make([]float32, len(dys)), make([]float32, len(xs)), make([]float32, len(ws))
	for b := range n {
		for o := range k {
			for oy := range oh {
				for ox := range ow {
					yi := ((b*k+o)*oh+oy)*ow + ox
					for ch := range c {
						for i := range kh {
							for j := range kh {
								iy, ix := oy*2-1+i, ox*2-1+j
								if iy < 0 || iy >= h || ix < 0 || ix >= w {
									continue
								}
								xi, wi := ((b*c+ch)*h+iy)*w+ix, ((o*c+ch)*kh+i)*kh+j
								wy[yi] += xs[xi] * ws[wi]
								wdx[xi] += dys[yi] * ws[wi]
								wdw[wi] += dys[yi] * xs[xi]
							}
						}
					}
				}
			}
		}
	}
	host := func(x *Tensor) []float32 {
		v, err := x.ToHost(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for name, pair := range map[string][2][]float32{"y": {host(y), wy}, "dx": {host(dx), wdx}, "dw": {host(dw), wdw}} {
		if !equal(pair[0], pair[1]) {
			t.Errorf("%s = %v\nwant %v", name, pair[0], pair[1])
		}
	}
	if err := d.SetConvImpl(ConvIm2col); err != nil {
		t.Fatal(err)
	}
	if impl, _ := d.ConvImplInUse(); impl != ConvIm2col {
		t.Fatalf("after SetConvImpl(ConvIm2col): %v", impl)
	}
	if err := d.Conv2d(y, x, wt, p, 0); err != nil {
		t.Fatal(err)
	}
	_ = d.SetConvImpl(ConvAuto)
	bad, _ := d.Alloc(Float32, n, k, oh+1, ow)
	if err := d.Conv2d(bad, x, wt, p, 0); err == nil {
		t.Fatal("wrong output shape accepted")
	}
}
