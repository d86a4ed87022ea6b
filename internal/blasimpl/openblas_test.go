//go:build cgo && !purego

package blasimpl

import (
	"math"
	"math/rand"
	"os"
	"testing"

	"golang.org/x/sys/cpu"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// TestKernelChoice: on a Zen 4 with OPENBLAS_CORETYPE unset, the Haswell kernels are in use;
// elsewhere OpenBLAS's own choice stands.
func TestKernelChoice(t *testing.T) {
	_, set := os.LookupEnv("OPENBLAS_CORETYPE")
	t.Logf("CPU is Zen 4: %v; OpenBLAS kernels: %s", zen4(), Core())
	if !zen4() || set || os.Getenv("GP_OPENBLAS_KEEP_CORE") == "1" {
		t.Skip("not a Zen 4 with OpenBLAS's own choice of kernels")
	}
	if Core() != "Haswell" {
		t.Fatalf("OpenBLAS kernels %q on Zen 4, want Haswell", Core())
	}
}

// TestGenericKernelsUpgraded: where OpenBLAS would run its generic kernels on a CPU that has
// AVX, AVX2 or (Intel's) AVX-512, they are replaced by Sandybridge's, Haswell's or
// SkylakeX's; its choice of a kernel set it
// knows stands. On this CPU, with OPENBLAS_CORETYPE unset, the kernels in use are no
// generic ones when the CPU has AVX.
func TestGenericKernelsUpgraded(t *testing.T) {
	for _, tc := range []struct {
		core string
		f    features
		want string
	}{
		{"Prescott", features{avx512: true, avx2: true, avx: true}, "SkylakeX"},
		{"Prescott", features{avx2: true, avx: true}, "Haswell"},
		{"Core2", features{avx: true}, "Sandybridge"},
		{"Prescott", features{}, ""},
		{"Haswell", features{avx2: true, avx: true}, ""},
		{"Haswell", features{avx512: true, avx2: true, avx: true}, ""},
		{"SkylakeX", features{avx512: true, avx2: true, avx: true}, ""},
		{"Zen", features{avx2: true, avx: true}, ""},
	} {
		if got := upgradeCore(tc.core, tc.f); got != tc.want {
			t.Errorf("upgradeCore(%s, %+v) = %q, want %q", tc.core, tc.f, got, tc.want)
		}
	}
	_, set := os.LookupEnv("OPENBLAS_CORETYPE")
	t.Logf("OpenBLAS kernels: %s", Core())
	if set || os.Getenv("GP_OPENBLAS_KEEP_CORE") == "1" || !cpu.X86.HasAVX {
		t.Skip("OPENBLAS_CORETYPE set, or a CPU without AVX")
	}
	if upgradeCore(Core(), features{avx2: true, avx: true}) != "" {
		t.Errorf("OpenBLAS runs its generic %s kernels on a CPU with AVX", Core())
	}
}

// TestNarrow: OpenBLAS's kernels are narrower than the CPU's units where it runs other than
// its AVX-512 kernels on a CPU with full-width AVX-512, and only there.
func TestNarrow(t *testing.T) {
	for _, tc := range []struct {
		core    string
		full512 bool
		want    bool
	}{
		{"Haswell", true, true},
		{"Zen", true, true},
		{"Sandybridge", true, true},
		{"SkylakeX", true, false},
		{"Cooperlake", true, false},
		{"SapphireRapids", true, false},
		{"Haswell", false, false}, // no AVX-512, or Zen 4's halves
		{"SkylakeX", false, false},
	} {
		if got := narrowCore(tc.core, tc.full512); got != tc.want {
			t.Errorf("narrowCore(%s, %v) = %v, want %v", tc.core, tc.full512, got, tc.want)
		}
	}
	t.Logf("OpenBLAS kernels %s, Zen 4 %v, AVX-512F %v: Narrow() = %v", Core(), zen4(), cpu.X86.HasAVX512F, Narrow())
	if !cpu.X86.HasAVX512F && Narrow() {
		t.Error("Narrow() on a CPU without AVX-512")
	}
}

// TestSgemmMatchesNaive: the registered sgemm, with whatever kernels were chosen, agrees
// with a float64 loop on the four transpose combinations and edge sizes (float32 rounding:
// 1e-5 relative to the sum of absolute products).
func TestSgemmMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, c := range []struct{ m, n, k int }{{1, 1, 1}, {7, 5, 3}, {64, 256, 576}, {33, 17, 129}, {576, 64, 256}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			a, b := make([]float32, c.m*c.k), make([]float32, c.k*c.n)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			// a is m×k (stored k×m when transposed), b is k×n (stored n×k when transposed).
			at := func(i, p int) float64 {
				if tr[0] {
					return float64(a[p*c.m+i])
				}
				return float64(a[i*c.k+p])
			}
			bt := func(p, j int) float64 {
				if tr[1] {
					return float64(b[j*c.k+p])
				}
				return float64(b[p*c.n+j])
			}
			lda, ldb := c.k, c.n
			ta, tb := blas.NoTrans, blas.NoTrans
			if tr[0] {
				lda, ta = c.m, blas.Trans
			}
			if tr[1] {
				ldb, tb = c.k, blas.Trans
			}
			got := make([]float32, c.m*c.n)
			blas32.Implementation().Sgemm(ta, tb, c.m, c.n, c.k, 1, a, lda, b, ldb, 0, got, c.n)
			for i := 0; i < c.m; i++ {
				for j := 0; j < c.n; j++ {
					var s, abs float64
					for p := 0; p < c.k; p++ {
						s += at(i, p) * bt(p, j)
						abs += math.Abs(at(i, p) * bt(p, j))
					}
					if d := math.Abs(float64(got[i*c.n+j]) - s); d > 1e-5*abs+1e-30 {
						t.Fatalf("%dx%dx%d trans %v: c[%d,%d] = %v, want %v", c.m, c.n, c.k, tr, i, j, got[i*c.n+j], s)
					}
				}
			}
		}
	}
}
