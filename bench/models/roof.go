package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// Note [Training FLOPs and the roof]: a row's flops_per_image counts the multiply-adds (two
// FLOPs each) of the products the compiled training program runs, backward as it actually
// computes it: every convolution, linear layer and window attention of the forward, and
// each gradient op that the program runs (the first convolution's input gradient is not
// computed, so it is not counted). Element-wise ops, norms and softmax are left out: they are
// memory-bound, and counting them would make the roof fraction look better than the products
// are. roof_gflops is the fastest GEMM in the process at the row's thread count: OpenBLAS's
// sgemm on the model's own largest product (its forward GEMM after im2col) and on a 2048³
// square, and the project's AVX-512 kernel (simd.GemmRows32) on the same two, which
// outruns OpenBLAS where OpenBLAS runs narrower kernels than the CPU's (its AVX2 kernels on
// an AMD Zen 5: about twice). Each is measured right after each (ours, PyTorch) pair, since a
// shared machine's speed moves within a run (the square roof has been seen to fall from 165
// to 92 GFLOP/s between rows); roof_fraction is the median over the repetitions of img/s ×
// flops_per_image over the fastest of the roofs measured beside that repetition.

// flopsReport is what -flops prints: the model's training FLOPs per image, by op kind, and
// the shape of its largest forward product as a GEMM (M×K times K×N).
type flopsReport struct {
	PerImage float64            `json:"flops_per_image"`
	ByKind   map[string]float64 `json:"by_kind"`
	M        int                `json:"gemm_m"`
	N        int                `json:"gemm_n"`
	K        int                `json:"gemm_k"`
}

// countFlops compiles arch's training program for batch images of side size and sums the
// FLOPs of its products (see Note [Training FLOPs and the roof]).
func countFlops(arch string, batch, size int) (flopsReport, error) {
	mod, err := models.New(arch, 1000)
	if err != nil {
		return flopsReport{}, err
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		return flopsReport{}, err
	}
	p, err := nn.Compile(m, nn.Classify(batch, []int{3, size, size}, 0))
	if err != nil {
		return flopsReport{}, err
	}
	defer p.Close()
	r := flopsReport{ByKind: map[string]float64{}}
	var total, biggest float64
	for _, n := range p.Graph().AllNodes() {
		if n.Op() == nil {
			continue
		}
		d, ok := ops.Describe(n.Op())
		if !ok {
			continue
		}
		f, gm, gn, gk := productFlops(d)
		if f == 0 {
			continue
		}
		total += f
		r.ByKind[d.Kind.String()] += f / float64(batch)
		if (d.Kind == ops.KindConv2d || d.Kind == ops.KindLinear) && f > biggest {
			biggest, r.M, r.N, r.K = f, gm, gn, gk
		}
	}
	r.PerImage = total / float64(batch)
	return r, nil
}

// productFlops is the FLOPs of one product op, and for forward convolutions and linear
// layers the GEMM it is (M×K by K×N).
func productFlops(d ops.Desc) (f float64, m, n, k int) {
	switch d.Kind {
	case ops.KindLinear, ops.KindLinearGradX, ops.KindLinearGradW:
		m, n, k = d.Rows, d.OutF, d.InF
		return 2 * float64(m) * float64(n) * float64(k), m, n, k
	case ops.KindConv2d, ops.KindConv2dGradX, ops.KindConv2dGradW:
		c := d.Conv
		g := max(c.Groups, 1)
		m, n, k = c.Out, c.N*c.OH*c.OW, c.C/g*c.KH*c.KW
		return 2 * float64(m) * float64(n) * float64(k), m, n, k
	case ops.KindWindowAttention:
		a := d.Attention
		return 4 * float64(a.Bw) * float64(a.N) * float64(a.N) * float64(a.C), 0, 0, 0 // q·kᵀ and p·v
	case ops.KindWindowAttentionGrad:
		a := d.Attention
		return 8 * float64(a.Bw) * float64(a.N) * float64(a.N) * float64(a.C), 0, 0, 0 // dp, dv, dq, dk
	}
	return 0, 0, 0, 0
}

// roofReport is what -roof prints: sgemm GFLOP/s at this process's thread count.
type roofReport struct {
	Square float64 `json:"square_gflops"` // the BLAS on 2048³
	Model  float64 `json:"model_gflops"`  // the BLAS on the model's largest forward product
	// Own and OwnSquare are the project's AVX-512 GEMM kernel (simd.GemmRows32, rows split
	// across the threads) on the model's largest forward product and on 2048³, 0 where the
	// active level has no such kernel: where the BLAS runs narrower kernels than the CPU's
	// (OpenBLAS on its AVX2 kernels on an AMD Zen 5), it is the faster GEMM in the process,
	// and the roof.
	Own       float64 `json:"own_gflops"`
	OwnSquare float64 `json:"own_square_gflops"`
}

// best is the roof: the fastest of the measured GEMMs.
func (r roofReport) best() float64 { return max(r.Square, r.Model, r.Own, r.OwnSquare) }

// measureRoof times the BLAS's sgemm on an m×k by k×n product for at least a second.
func measureRoof(m, n, k int) float64 {
	impl := blas32.Implementation()
	return timeGemm(m, n, k, func(a, b, c []float32) {
		impl.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, k, b, n, 0, c, n)
	})
}

// measureOwnRoof times simd.GemmRows32 on an m×k by k×n product for at least a second,
// its rows split into ops.Threads() blocks run at once; 0 where it refuses the shape.
func measureOwnRoof(m, n, k int) float64 {
	if !simd.GemmRowsTakes(n, k) {
		return 0
	}
	w := max(1, min(ops.Threads(), m/16))
	ok := true
	f := timeGemm(m, n, k, func(a, b, c []float32) {
		var wg sync.WaitGroup
		res := make([]bool, w)
		for i := range w {
			lo, hi := i*m/w, (i+1)*m/w
			wg.Go(func() { res[i] = simd.GemmRows32(false, hi-lo, n, k, a[lo*k:], k, b, n, nil, c[lo*n:], n) })
		}
		wg.Wait()
		for _, r := range res {
			ok = ok && r
		}
	})
	if !ok {
		return 0
	}
	return f
}

// timeGemm times gemm (c = a·b, a m×k, b k×n, row-major) for at least a second and
// returns its GFLOP/s at the first quartile of the calls' times.
func timeGemm(m, n, k int, gemmAB func(a, b, c []float32)) float64 {
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for i := range a {
		a[i] = float32(i%7) * 0.1
	}
	for i := range b {
		b[i] = float32(i%5) * 0.1
	}
	gemm := func() { gemmAB(a, b, c) }
	gemm() // warm-up
	var times []float64
	start := time.Now()
	for len(times) < 3 || time.Since(start) < time.Second {
		t := time.Now()
		gemm()
		times = append(times, time.Since(t).Seconds())
	}
	slices.Sort(times)
	best := times[len(times)/4] // the first quartile: the machine's speed, not its disturbances
	return 2 * float64(m) * float64(n) * float64(k) / best / 1e9
}

// roofChild is the -roof child: the roof at the model's GEMM shape and the square one.
func roofChild(m, n, k int) error {
	r := roofReport{Square: measureRoof(2048, 2048, 2048), OwnSquare: measureOwnRoof(2048, 2048, 2048)}
	if m > 0 && n > 0 && k > 0 {
		r.Model = measureRoof(m, n, k)
		r.Own = measureOwnRoof(m, n, k)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// topKinds lists by_kind's largest entries, for the table's footnote.
func topKinds(by map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	var total float64
	for k, v := range by {
		all = append(all, kv{k, v})
		total += v
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	s := ""
	for i, e := range all {
		if i == n {
			break
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.0f%%", e.k, 100*e.v/total)
	}
	return s
}
