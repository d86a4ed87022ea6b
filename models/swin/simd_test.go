package swin

import (
	"math"
	"math/rand"
	"runtime"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/internal/simd/simdtest"
	"gorgonia.org/tensor"
)

// TestSmallGemmMatchesReference checks gemm's small float32 path (the C kernel at each SIMD level
// the CPU has, the BLAS at level off) against a float64 product on every transposition and odd sizes,
// including 1 and sizes that are not multiples of 16. Bound: a float32 sum of k products
// in any order is within k·2⁻²³ of Σ|a·b| (plus the rounding of alpha's product).
func TestSmallGemmMatchesReference(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(8))
		for _, s := range [][3]int{{1, 1, 1}, {49, 49, 32}, {49, 32, 49}, {5, 17, 3}, {17, 65, 7}, {4, 64, 16}, {7, 100, 33}, {3, 1, 100}} {
			m, n, k := s[0], s[1], s[2]
			for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				tA, tB := tr[0], tr[1]
				lda, ldb, ldc := k+3, n+5, n+2 // strided, as in attention's views of qkv
				if tA {
					lda = m + 3
				}
				if tB {
					ldb = k + 5
				}
				a := make([]float32, max(m, k)*lda)
				b := make([]float32, max(n, k)*ldb)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				c := make([]float32, m*ldc)
				for i := range c {
					c[i] = 99 // beta is 0: overwritten, never read
				}
				const alpha = 0.17677669
				gemm(tA, tB, m, n, k, float32(alpha), a, lda, b, ldb, 0, c, ldc)
				for i := range m {
					for j := range n {
						var want, mag float64
						for p := range k {
							av, bv := a[i*lda+p], b[p*ldb+j]
							if tA {
								av = a[p*lda+i]
							}
							if tB {
								bv = b[j*ldb+p]
							}
							want += float64(av) * float64(bv)
							mag += math.Abs(float64(av) * float64(bv))
						}
						want *= alpha
						tol := (float64(k)+2)*math.Ldexp(1, -23)*mag*alpha + 1e-30
						if got := float64(c[i*ldc+j]); math.Abs(got-want) > tol {
							t.Fatalf("%v m=%d n=%d k=%d: c[%d,%d] = %g, want %g ± %g", tr, m, n, k, i, j, got, want, tol)
						}
					}
					for j := n; j < ldc && i < m-1; j++ {
						if c[i*ldc+j] != 99 {
							t.Fatalf("%v m=%d n=%d k=%d: c[%d,%d] outside the product written", tr, m, n, k, i, j)
						}
					}
				}
			}
		}
	})
}

// TestSoftmaxRows32MatchesGo compares the C softmax (at each SIMD level the CPU has) with the Go loop:
// the same float64 operations per element, only the row sum's order differs, which can move
// a float32 result by one ulp at most. Sizes 1 to 50, with and without a mask, scores that
// reach the exponential's -700 cut-off, and a row with a NaN.
func TestSoftmaxRows32MatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(9))
		for _, n := range []int{1, 2, 7, 8, 9, 17, 49, 50} {
			for _, masked := range []bool{false, true} {
				s := make([]float32, n*n)
				bias := make([]float64, n*n)
				for i := range s {
					s[i] = float32(rng.NormFloat64() * 4)
					bias[i] = rng.NormFloat64()
				}
				if n > 2 {
					s[1] = -1000 // below the cut-off: exp is 0
					s[n*n-1] = float32(math.NaN())
				}
				var mask []float32
				if masked {
					mask = make([]float32, n*n)
					for i := range mask {
						if rng.Intn(3) == 0 {
							mask[i] = -100
						}
					}
				}
				got := append([]float32(nil), s...)
				want := append([]float32(nil), s...)
				softmaxRows32(got, bias, mask, n)
				withGo(t, func() { softmaxRows32(want, bias, mask, n) })
				for i := range want {
					w, g := want[i], got[i]
					if math.IsNaN(float64(w)) || math.IsNaN(float64(g)) {
						if math.IsNaN(float64(w)) != math.IsNaN(float64(g)) {
							t.Fatalf("n=%d masked=%v: [%d] = %g, want %g", n, masked, i, g, w)
						}
						continue
					}
					if d := int64(math.Float32bits(w)) - int64(math.Float32bits(g)); d > 1 || d < -1 {
						t.Fatalf("n=%d masked=%v: [%d] = %g, want %g (more than one ulp)", n, masked, i, g, w)
					}
				}
			}
		}
	})
}

// TestSoftmaxBwdMatchesGo compares the C softmax gradient with the Go loop: the same float64
// formula per element, only Σ P·dP is added in another order, which moves dS by a few
// float64 ulps of the row's scale (so at most an ulp or so in float32: 4e-7 of the largest
// |dS|) and the float64 accumulator by about 1e-15 of its scale (1e-12 allowed).
func TestSoftmaxBwdMatchesGo(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		rng := rand.New(rand.NewSource(13))
		for _, n := range []int{1, 2, 7, 8, 9, 49, 50} {
			p, d := make([]float32, n*n), make([]float32, n*n)
			for i := range p {
				p[i] = float32(rng.Float64())
				d[i] = float32(rng.NormFloat64())
			}
			acc0 := make([]float64, n*n)
			for i := range acc0 {
				acc0[i] = rng.NormFloat64()
			}
			dg, ag := append([]float32(nil), d...), append([]float64(nil), acc0...)
			dw, aw := append([]float32(nil), d...), append([]float64(nil), acc0...)
			softmaxBwd(p, dg, ag, n)
			withGo(t, func() { softmaxBwd(p, dw, aw, n) })
			var ds, as float64
			for i := range dw {
				ds = max(ds, math.Abs(float64(dw[i])))
				as = max(as, math.Abs(aw[i]))
			}
			for i := range dw {
				if math.Abs(float64(dg[i]-dw[i])) > 4e-7*ds || math.Abs(ag[i]-aw[i]) > 1e-12*as {
					t.Fatalf("n=%d [%d]: dS %g acc %g, want %g %g", n, i, dg[i], ag[i], dw[i], aw[i])
				}
			}
		}
	})
}

// withGo runs f at SIMD level off (the Go code), then restores the level.
func withGo(t *testing.T, f func()) {
	t.Helper()
	restore, err := simd.Set(simd.Off)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	f()
}

// TestSmallGemmSubnormalOperands: a shifted window's masked probabilities are subnormal
// floats; the small GEMM reads them as zero (see simd.SmallGemm32), which moves each element
// by at most 2⁻¹²⁶·Σ|a·b|, far inside the bound of TestSmallGemmMatchesReference. The
// caller's floating-point mode is restored: Go code on the same thread still computes
// subnormal results afterwards.
func TestSmallGemmSubnormalOperands(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		rng := rand.New(rand.NewSource(21))
		const m, n, k = 49, 32, 49
		a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
		for i := range a {
			a[i] = float32(rng.Float64() / 49)
			if (i/k < 21) != (i%k < 21) {
				a[i] = math.Float32frombits(uint32(1 + rng.Intn(1<<20))) // subnormal
			}
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		for i := range m {
			for j := range n {
				var want, mag float64
				for p := range k {
					want += float64(a[i*k+p]) * float64(b[p*n+j])
					mag += math.Abs(float64(a[i*k+p]) * float64(b[p*n+j]))
				}
				tol := (k+2)*math.Ldexp(1, -23)*mag + math.Ldexp(1, -126)*mag
				if got := float64(c[i*n+j]); math.Abs(got-want) > tol {
					t.Fatalf("c[%d,%d] = %g, want %g ± %g", i, j, got, want, tol)
				}
			}
		}
		x := math.Float32frombits(2) // the second smallest subnormal
		if h := x * float32(rng.Float64()*0.25+0.5); h == 0 {
			t.Fatal("the small GEMM left subnormals flushed to zero in the caller's floating-point mode")
		}
	})
}

// TestAttnWindowKernelsMatchPerHead: the window-attention ops' float32 forward and backward
// through the C kernels that take a whole window (all heads in one call) give the same bits
// as their per-head loops through the small GEMM and softmax kernels, at each SIMD level the
// CPU has (at level off both run the loops): outputs, probabilities, the qkv gradient and
// the bias gradient. Shapes: swin_t's 7x7 windows (masked, as in a shifted block, and not)
// and a small odd one (2x2 windows, heads of 3 channels).
func TestAttnWindowKernelsMatchPerHead(t *testing.T) {
	simdtest.Each(t, func(t *testing.T, _ simd.Level) {
		for _, s := range []struct {
			win, heads, c, bw, nW int
			masked                bool
		}{{7, 3, 96, 6, 3, true}, {7, 2, 64, 3, 1, false}, {2, 2, 6, 4, 2, true}} {
			n := s.win * s.win
			rng := rand.New(rand.NewSource(int64(31 + s.c)))
			var mask []float32
			if s.masked {
				mask = make([]float32, s.nW*n*n)
				for i := range mask {
					if rng.Intn(3) == 0 {
						mask[i] = -100
					}
				}
			}
			rel := relativePositionIndex(s.win)
			tRows := (2*s.win - 1) * (2*s.win - 1)
			randT := func(shape ...int) *tensor.Dense {
				x := tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
				for i, d := 0, x.Data().([]float32); i < len(d); i++ {
					d[i] = float32(rng.NormFloat64())
				}
				return x
			}
			qkv, tab, dy := randT(s.bw, n, 3*s.c), randT(tRows, s.heads), randT(s.bw, n, s.c)
			run := func(perHead bool) (y, p, dq []float32, dBias []float64) {
				attnPerHead = perHead
				defer func() { attnPerHead = false }()
				fwd := &attnOp{opBase: newOpBase("WindowAttention"), windowAttn: windowAttn{heads: s.heads, n: n, c: s.c, relIdx: rel, nW: s.nW, mask: mask}, bw: s.bw, tRows: tRows}
				bwd := &attnGradOp{opBase: newOpBase("WindowAttentionGrad"), fwd: fwd}
				yv, err := fwd.Do(qkv, tab)
				if err != nil {
					t.Fatal(err)
				}
				dv, err := bwd.Do(qkv, dy)
				if err != nil {
					t.Fatal(err)
				}
				return yv.Data().([]float32), fwd.p32, dv.Data().([]float32), fwd.dBias
			}
			yw, pw, dw, bw := run(false)
			yh, ph, dh, bh := run(true)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"y", yw, yh}, {"P", pw, ph}, {"dqkv", dw, dh}} {
				for i := range c.want {
					if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
						t.Fatalf("%+v: %s[%d] = %g by window, %g by head", s, c.name, i, c.got[i], c.want[i])
					}
				}
			}
			for i := range bh {
				if bw[i] != bh[i] {
					t.Fatalf("%+v: bias gradient [%d] = %g by window, %g by head", s, i, bw[i], bh[i])
				}
			}
		}
	})
}
