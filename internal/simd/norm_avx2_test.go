package simd

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	_ "github.com/gorgonia-parallel/gp/internal/blasimpl"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// The AVX2 kernels of norm_avx2.h, gemm_avx2.h and softmax_avx2.h against their AVX-512
// twins: the same results bit for bit (NaNs only as NaNs), on sizes around the vector
// widths, inputs with NaNs, infinities and signed zeros, and nothing written past the end of
// any output. Skipped unless the CPU and the build run both levels.

// nxGuard is how many sentinels follow each output; nothing may overwrite them.
const nxGuard = 9

const nxSentinel32, nxSentinel64 = float32(-12345.5), -98765.25

// nxOut32 is an output of n float32s filled with fill, followed by nxGuard sentinels.
func nxOut32(n int, fill float32) []float32 {
	s := make([]float32, n+nxGuard)
	for i := range s {
		s[i] = fill
	}
	for i := n; i < len(s); i++ {
		s[i] = nxSentinel32
	}
	return s
}

func nxOut64(n int, fill float64) []float64 {
	s := make([]float64, n+nxGuard)
	for i := range s {
		s[i] = fill
	}
	for i := n; i < len(s); i++ {
		s[i] = nxSentinel64
	}
	return s
}

// nxSpecials32 fills x with normal values times scale, with every fifth one special when
// special.
func nxSpecials32(rng *rand.Rand, n int, scale float64, special bool) []float32 {
	sp := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-40, -1e-40, 3e38, -3e38, 1e-30}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64()*scale + 0.3)
		if special && rng.Intn(5) == 0 {
			x[i] = sp[rng.Intn(len(sp))]
		}
	}
	return x
}

// nxRand64 is n standard normal float64s.
func nxRand64(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

// nxAtBoth runs f at AVX512 then at AVX2 and compares what each returned: []float32 and
// []float64 outputs, bit for bit (any NaN matches any NaN). Outputs end in nxGuard sentinels
// that must survive.
func nxAtBoth(t *testing.T, what string, f func() []any) {
	t.Helper()
	run := func(l Level) []any {
		restore, err := Set(l)
		if err != nil {
			t.Skip(err)
		}
		defer restore()
		return f()
	}
	want, got := run(AVX512), run(AVX2)
	for o := range want {
		switch w := want[o].(type) {
		case []float32:
			g := got[o].([]float32)
			for i := range w {
				if math.Float32bits(w[i]) != math.Float32bits(g[i]) && !(w[i] != w[i] && g[i] != g[i]) {
					t.Fatalf("%s output %d: [%d] = %g (%#x) at avx2, %g (%#x) at avx512", what, o, i, g[i],
						math.Float32bits(g[i]), w[i], math.Float32bits(w[i]))
				}
			}
			for i := len(g) - nxGuard; i < len(g); i++ {
				if g[i] != nxSentinel32 {
					t.Fatalf("%s output %d: element %d past the end written", what, o, i-(len(g)-nxGuard))
				}
			}
		case []float64:
			g := got[o].([]float64)
			for i := range w {
				if math.Float64bits(w[i]) != math.Float64bits(g[i]) && !(w[i] != w[i] && g[i] != g[i]) {
					t.Fatalf("%s output %d: [%d] = %.17g at avx2, %.17g at avx512", what, o, i, g[i], w[i])
				}
			}
			for i := len(g) - nxGuard; i < len(g); i++ {
				if g[i] != nxSentinel64 {
					t.Fatalf("%s output %d: element %d past the end written", what, o, i-(len(g)-nxGuard))
				}
			}
		default:
			t.Fatalf("%s: output %d of type %T", what, o, w)
		}
	}
}

// nxNeedBoth skips the test unless this CPU and build run both AVX2 and AVX512.
func nxNeedBoth(t *testing.T) {
	t.Helper()
	for _, l := range []Level{AVX2, AVX512} {
		if err := Supported(l); err != nil {
			t.Skip(err)
		}
	}
}

// TestAVX2NormMatchesAVX512: batch norm's sums and elementwise passes on every plane size
// to 34 and a few larger (odd and even sample counts: gp2_bn_sums pairs planes), channel
// ranges, ReLU and scaling around the vector widths, layer norm on every row length to 34
// and swin's.
func TestAVX2NormMatchesAVX512(t *testing.T) {
	nxNeedBoth(t)
	rng := rand.New(rand.NewSource(21))
	var hws []int
	for hw := 0; hw <= 34; hw++ {
		hws = append(hws, hw)
	}
	hws = append(hws, 49, 63, 64, 65, 100, 196, 1024)
	for _, special := range []bool{false, true} {
		for _, hw := range hws {
			for _, nc := range [][2]int{{1, 1}, {2, 3}, {3, 2}, {5, 3}} {
				n, c := nc[0], nc[1]
				name := fmt.Sprintf("n=%d c=%d hw=%d special=%v", n, c, hw, special)
				x, dy := nxSpecials32(rng, n*c*hw+nxGuard, 2, special), nxSpecials32(rng, n*c*hw+nxGuard, 1, special)
				sel := nxSpecials32(rng, n*c*hw+nxGuard, 1, true)
				mean, istd, gamma, beta := nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c)
				k1, k2, k3 := nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c)
				k2[0], k3[0] = 0, 0 // the k1·dy-only path
				for _, r := range [][2]int{{0, c}, {c - 1, c}, {c / 2, c}} {
					lo, hi := r[0], r[1]
					nxAtBoth(t, "BNSums "+name, func() []any {
						sum, sq := nxOut64(c, 7), nxOut64(c, 7)
						BNSums(x[:n*c*hw], n, c, hw, lo, hi, sum[:c], sq[:c])
						return []any{sum, sq}
					})
					nxAtBoth(t, "BNGradSums "+name, func() []any {
						sdy, sdyx, mdy, mdyx := nxOut64(c, 7), nxOut64(c, 7), nxOut64(c, 7), nxOut64(c, 7)
						BNGradSums(x[:n*c*hw], dy[:n*c*hw], nil, n, c, hw, lo, hi, mean, sdy[:c], sdyx[:c])
						BNGradSums(x[:n*c*hw], dy[:n*c*hw], sel[:n*c*hw], n, c, hw, lo, hi, mean, mdy[:c], mdyx[:c])
						return []any{sdy, sdyx, mdy, mdyx}
					})
					rows := n * c
					nxAtBoth(t, "BNApply "+name, func() []any {
						y, yr := nxOut32(rows*hw, 5), nxOut32(rows*hw, 5)
						BNApply(x[:rows*hw], y[:rows*hw], c, hw, lo*n, hi*n, mean, istd, gamma, beta, false)
						BNApply(x[:rows*hw], yr[:rows*hw], c, hw, lo*n, hi*n, mean, istd, gamma, beta, true)
						return []any{y, yr}
					})
					nxAtBoth(t, "BNGradApply "+name, func() []any {
						dx, mdx := nxOut32(rows*hw, 5), nxOut32(rows*hw, 5)
						BNGradApply(x[:rows*hw], dy[:rows*hw], nil, dx[:rows*hw], c, hw, lo*n, hi*n, k1, k2, k3)
						BNGradApply(x[:rows*hw], dy[:rows*hw], sel[:rows*hw], mdx[:rows*hw], c, hw, lo*n, hi*n, k1, k2, k3)
						return []any{dx, mdx}
					})
				}
			}
		}
		for _, n := range append(hws, 1000, 1001, 4099) {
			x, sel := nxSpecials32(rng, n+nxGuard, 1, special), nxSpecials32(rng, n+nxGuard, 1, true)
			nxAtBoth(t, fmt.Sprintf("ReLUSel/ScaleTo n=%d special=%v", n, special), func() []any {
				y, y2, z := nxOut32(n, 5), nxOut32(n, 5), nxOut32(n, 5)
				ReLUSel(x[:n], y[:n], sel[:n])
				ReLUSel(x[:n], y2[:n], x[:n])
				ScaleTo(x[:n], z[:n], 1/0.7)
				return []any{y, y2, z}
			})
		}
		var ms []int
		for m := 1; m <= 34; m++ {
			ms = append(ms, m)
		}
		ms = append(ms, 49, 96, 100, 385, 768)
		for _, m := range ms {
			for _, rows := range []int{1, 2, 5, 11} {
				x, dy := nxSpecials32(rng, rows*m+nxGuard, 3, special), nxSpecials32(rng, rows*m+nxGuard, 1, special)
				gamma, beta := nxRand64(rng, m), nxRand64(rng, m)
				dg0, db0 := nxRand64(rng, m), nxRand64(rng, m)
				for _, r := range [][2]int{{0, rows}, {rows - 1, rows}, {1, rows}} {
					lo, hi := r[0], r[1]
					nxAtBoth(t, fmt.Sprintf("LN rows=%d m=%d [%d,%d) special=%v", rows, m, lo, hi, special), func() []any {
						y, mean, istd := nxOut32(rows*m, 5), nxOut64(rows, 7), nxOut64(rows, 7)
						LNForward(x[:rows*m], y[:rows*m], lo, hi, m, gamma, beta, 1e-5, mean[:rows], istd[:rows])
						dx, dg, db := nxOut32(rows*m, 5), nxOut64(m, 0), nxOut64(m, 0)
						copy(dg, dg0)
						copy(db, db0)
						LNBackward(x[:rows*m], dy[:rows*m], dx[:rows*m], lo, hi, m, gamma, mean[:rows], istd[:rows], dg[:m], db[:m])
						return []any{y, mean, istd, dx, dg, db}
					})
				}
			}
		}
	}
}

// TestAVX2GemmMatchesAVX512: the small GEMM on every transposition, strided operands and
// random sizes around the block shapes (rows and columns computed twice by overlapping
// blocks, n below 8), attention's two shapes included.
func TestAVX2GemmMatchesAVX512(t *testing.T) {
	nxNeedBoth(t)
	rng := rand.New(rand.NewSource(22))
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 41, 48, 49, 56, 57, 64, 65, 100}
	for it := 0; it < 400; it++ {
		m, n, k := sizes[rng.Intn(len(sizes))], sizes[rng.Intn(len(sizes))], sizes[rng.Intn(len(sizes))]
		if it < 4 {
			m, n, k = 49, 49, 32
		} else if it < 8 {
			m, n, k = 49, 32, 49
		}
		if m*n*k > SmallGemmMax || k*n > SmallGemmMax/16 {
			continue
		}
		tA, tB := it&1 != 0, it&2 != 0
		lda, ldb, ldc := k+3, n+5, n+2
		if tA {
			lda = m + 3
		}
		if tB {
			ldb = k + 5
		}
		a, b := nxSpecials32(rng, max(m, k)*lda, 1, it%7 == 0), nxSpecials32(rng, max(n, k)*ldb, 1, it%7 == 0)
		nxAtBoth(t, fmt.Sprintf("SmallGemm32 %v %v m=%d n=%d k=%d", tA, tB, m, n, k), func() []any {
			c := nxOut32(m*ldc, 99)
			if !SmallGemm32(tA, tB, m, n, k, 0.17677669, a, lda, b, ldb, c[:m*ldc], ldc) {
				t.Fatal("SmallGemm32 did not run")
			}
			return []any{c}
		})
	}
}

// TestAVX2SoftmaxMatchesAVX512: the softmax and its gradient on every n×n to 70 (so every
// count of rows left after the blocks of four), with and without a mask, with rows holding
// -1000, ±Inf, NaN and -0.
func TestAVX2SoftmaxMatchesAVX512(t *testing.T) {
	nxNeedBoth(t)
	rng := rand.New(rand.NewSource(23))
	for n := 1; n <= 70; n++ {
		for v := 0; v < 4; v++ {
			s := make([]float32, n*n)
			bias := nxRand64(rng, n*n)
			for i := range s {
				s[i] = float32(rng.NormFloat64() * 4)
			}
			if v >= 2 && n > 2 {
				// Below the exponential's cut-off, an infinity, a NaN, signed zeros.
				s[1] = -1000
				s[n*n-1] = float32(math.NaN())
				s[n] = float32(math.Inf(-1))
				if n > 3 {
					s[2*n+1], bias[2*n+1] = float32(math.Inf(1)), 0
					s[3*n-1], bias[3*n-1] = float32(math.Copysign(0, -1)), math.Copysign(0, -1)
				}
			}
			var mask []float32
			if v%2 == 1 {
				mask = make([]float32, n*n)
				for i := range mask {
					if rng.Intn(3) == 0 {
						mask[i] = -100
					}
				}
			}
			nxAtBoth(t, fmt.Sprintf("SoftmaxRows32 n=%d v=%d", n, v), func() []any {
				g := nxOut32(n*n, 0)
				copy(g, s)
				SoftmaxRows32(g[:n*n], bias, mask, n)
				return []any{g}
			})
			p, d, acc := nxSpecials32(rng, n*n, 1, v >= 2), nxSpecials32(rng, n*n, 1, false), nxRand64(rng, n*n)
			nxAtBoth(t, fmt.Sprintf("SoftmaxBwd n=%d v=%d", n, v), func() []any {
				dg, ag := nxOut32(n*n, 0), nxOut64(n*n, 0)
				copy(dg, d)
				copy(ag, acc)
				SoftmaxBwd(p, dg[:n*n], ag[:n*n], n)
				return []any{dg, ag}
			})
		}
	}
}

// BenchmarkSmallGemm: window attention's products at each level (the C kernels) and
// OpenBLAS's sgemm on the same operands.
func BenchmarkSmallGemm(b *testing.B) {
	for _, s := range []struct {
		name    string
		tA, tB  bool
		m, n, k int
	}{
		{"QKt-49x49x32", false, true, 49, 49, 32},
		{"PV-49x32x49", false, false, 49, 32, 49},
		{"PtdO-49x32x49", true, false, 49, 32, 49},
	} {
		rng := rand.New(rand.NewSource(1))
		lda, ldb := s.k, s.n
		if s.tA {
			lda = s.m
		}
		if s.tB {
			ldb = s.k
		}
		a, bb := nxSpecials32(rng, max(s.m, s.k)*lda, 1, false), nxSpecials32(rng, max(s.n, s.k)*ldb, 1, false)
		c := make([]float32, s.m*s.n)
		for _, l := range []Level{AVX2, AVX512} {
			b.Run(s.name+"/"+l.String(), func(b *testing.B) {
				restore, err := Set(l)
				if err != nil {
					b.Skip(err)
				}
				defer restore()
				for i := 0; i < b.N; i++ {
					SmallGemm32(s.tA, s.tB, s.m, s.n, s.k, 0.17, a, lda, bb, ldb, c, s.n)
				}
			})
		}
		b.Run(s.name+"/openblas", func(b *testing.B) {
			ta, tb := blas.NoTrans, blas.NoTrans
			if s.tA {
				ta = blas.Trans
			}
			if s.tB {
				tb = blas.Trans
			}
			impl := blas32.Implementation()
			for i := 0; i < b.N; i++ {
				impl.Sgemm(ta, tb, s.m, s.n, s.k, 0.17, a, lda, bb, ldb, 0, c, s.n)
			}
		})
	}
}

// BenchmarkSoftmax: one window's 49×49 softmax and its gradient at each level.
func BenchmarkSoftmax(b *testing.B) {
	const n = 49
	rng := rand.New(rand.NewSource(1))
	s0, bias, p, d0, acc := nxSpecials32(rng, n*n, 3, false), nxRand64(rng, n*n), nxSpecials32(rng, n*n, 0.1, false),
		nxSpecials32(rng, n*n, 1, false), nxRand64(rng, n*n)
	s, d := make([]float32, n*n), make([]float32, n*n)
	for _, l := range []Level{AVX2, AVX512} {
		b.Run("rows/"+l.String(), func(b *testing.B) {
			restore, err := Set(l)
			if err != nil {
				b.Skip(err)
			}
			defer restore()
			for i := 0; i < b.N; i++ {
				copy(s, s0)
				SoftmaxRows32(s, bias, nil, n)
			}
		})
		b.Run("bwd/"+l.String(), func(b *testing.B) {
			restore, err := Set(l)
			if err != nil {
				b.Skip(err)
			}
			defer restore()
			for i := 0; i < b.N; i++ {
				copy(d, d0)
				SoftmaxBwd(p, d, acc, n)
			}
		})
	}
}

// BenchmarkNormKernels: each kernel of norm_avx2.h at each level, one thread, on
// BenchmarkNormOpsOnly's 32x64x32x32 batch (nn/ops) and on swin-t's first-stage layer norm
// (8 images of 56x56 tokens, 96 channels).
func BenchmarkNormKernels(b *testing.B) {
	const n, c, hw = 32, 64, 1024
	rng := rand.New(rand.NewSource(1))
	x, dy, y := nxSpecials32(rng, n*c*hw, 1, false), nxSpecials32(rng, n*c*hw, 1, false), make([]float32, n*c*hw)
	mean, istd, gamma, beta := nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c), nxRand64(rng, c)
	s1, s2 := make([]float64, c), make([]float64, c)
	const rows, m = 8 * 56 * 56, 96
	lx, ldy, ly := nxSpecials32(rng, rows*m, 1, false), nxSpecials32(rng, rows*m, 1, false), make([]float32, rows*m)
	lg, lb, lm, ls := nxRand64(rng, m), nxRand64(rng, m), make([]float64, rows), make([]float64, rows)
	dg, db := make([]float64, m), make([]float64, m)
	cases := []struct {
		name string
		f    func()
	}{
		{"BNSums", func() { BNSums(x, n, c, hw, 0, c, s1, s2) }},
		{"BNGradSums", func() { BNGradSums(x, dy, nil, n, c, hw, 0, c, mean, s1, s2) }},
		{"BNApplyReLU", func() { BNApply(x, y, c, hw, 0, n*c, mean, istd, gamma, beta, true) }},
		{"BNGradApply", func() { BNGradApply(x, dy, nil, y, c, hw, 0, n*c, mean, istd, gamma) }},
		{"ReLUSel", func() { ReLUSel(x, y, dy) }},
		{"ScaleTo", func() { ScaleTo(x, y, 1.25) }},
		{"LNForward96", func() { LNForward(lx, ly, 0, rows, m, lg, lb, 1e-5, lm, ls) }},
		{"LNBackward96", func() { LNBackward(lx, ldy, ly, 0, rows, m, lg, lm, ls, dg, db) }},
	}
	for _, cs := range cases {
		for _, l := range []Level{AVX2, AVX512} {
			b.Run(cs.name+"/"+l.String(), func(b *testing.B) {
				restore, err := Set(l)
				if err != nil {
					b.Skip(err)
				}
				defer restore()
				for i := 0; i < b.N; i++ {
					cs.f()
				}
			})
		}
	}
}
