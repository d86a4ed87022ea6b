package gpucheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
)

func gemmRef(ta, tb bool, m, n, k int, a, b []float32, round func(float32) float32) []float64 {
	c := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				av, bv := a[i*k+p], b[p*n+j]
				if ta {
					av = a[p*m+i]
				}
				if tb {
					bv = b[j*k+p]
				}
				s += float64(round(av)) * float64(round(bv))
			}
			c[i*n+j] = s
		}
	}
	return c
}

// GEMM through cuBLAS against a float64 CPU product: float32 to 1e-5, and autocast (inputs
// cast to bf16/fp16 on the device, float32 accumulation) against the product of the CPU-rounded
// inputs to 1e-2.
func TestGemmVsCPU(t *testing.T) {
	d := device(t)
	r := rand.New(rand.NewPCG(11, 12))
	const m, n, k = 129, 65, 300
	id := func(v float32) float32 { return v }
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		a, b := randn(r, m*k, 1), randn(r, k*n, 1)
		as, bs := []int{m, k}, []int{k, n}
		if tr[0] {
			as = []int{k, m}
		}
		if tr[1] {
			bs = []int{n, k}
		}
		da, db := upload(t, d, a, as...), upload(t, d, b, bs...)
		c := alloc(t, d, cuda.Float32, m, n)
		if err := d.MatMul(c, da, db, tr[0], tr[1], 1, 0); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("sgemm t=%v", tr), d, c, gemmRef(tr[0], tr[1], m, n, k, a, b, id), tol32)
		for _, f := range []struct {
			dev cuda.Format
			amp amp.Format
		}{{cuda.BF16, amp.BF16}, {cuda.FP16, amp.FP16}} {
			if err := d.MatMulAutocast(c, da, db, tr[0], tr[1], f.dev); err != nil {
				t.Fatal(err)
			}
			round := func(v float32) float32 { return amp.Round32(f.amp, v) }
			check(t, fmt.Sprintf("gemm %v t=%v", f.amp, tr), d, c, gemmRef(tr[0], tr[1], m, n, k, a, b, round), tol16)
		}
	}
}

// TestGemmThroughput prints TFLOP/s of a 4096³ GEMM in float32 and bf16/fp16 (the same
// sizes torch_bench.py measures with PyTorch).
func TestGemmThroughput(t *testing.T) {
	d := device(t)
	realGPUOnly(t, "throughput")
	const s = 4096
	r := rand.New(rand.NewPCG(13, 14))
	a, b := upload(t, d, randn(r, s*s, 1), s, s), upload(t, d, randn(r, s*s, 1), s, s)
	c := alloc(t, d, cuda.Float32, s, s)
	for _, dt := range []cuda.DType{cuda.Float32, cuda.BFloat16, cuda.Float16} {
		x, y := a, b
		if dt != cuda.Float32 {
			x, y = alloc(t, d, dt, s, s), alloc(t, d, dt, s, s)
			if err := d.Cast(x, a); err != nil {
				t.Fatal(err)
			}
			if err := d.Cast(y, b); err != nil {
				t.Fatal(err)
			}
		}
		run := func(iters int) time.Duration {
			if err := d.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for range iters {
				if err := d.MatMul(c, x, y, false, false, 1, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		run(3)
		const iters = 20
		el := run(iters)
		tflops := 2 * float64(s) * s * s * iters / el.Seconds() / 1e12
		t.Logf("GEMM %d^3 %-8v (float32 out): %.1f TFLOP/s", s, dt, tflops)
		fmt.Printf("{\"bench\":\"gemm\",\"impl\":\"gp\",\"size\":%d,\"dtype\":%q,\"tflops\":%.2f}\n", s, dt.String(), tflops)
	}
}
