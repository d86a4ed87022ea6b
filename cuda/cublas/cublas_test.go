package cublas

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

func addr(b []float32) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// gemmRef is the row-major reference: C = alpha·op(A)·op(B) + beta·C.
func gemmRef(ta, tb bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	for i := range m {
		for j := range n {
			var s float32
			for p := range k {
				av, bv := a[i*k+p], b[p*n+j]
				if ta {
					av = a[p*m+i]
				}
				if tb {
					bv = b[j*k+p]
				}
				s += av * bv
			}
			c[i*n+j] = alpha*s + beta*c[i*n+j]
		}
	}
}

// Against the fake column-major cuBLAS: Gemm's operand swap and leading dimensions give the
// row-major product for every transpose combination, and GemmEx/strided batched agree.
func TestGemmRowMajorMapping(t *testing.T) {
	cudatest.Require(t)
	h, err := Create()
	if err != nil {
		t.Fatal(err)
	}
	const m, n, k = 3, 5, 4
	for _, tc := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			a, b := make([]float32, m*k), make([]float32, k*n)
			for i := range a {
				a[i] = float32(i%7) - 2
			}
			for i := range b {
				b[i] = float32(i%5) * 0.5
			}
			want, got, got2 := make([]float32, m*n), make([]float32, m*n), make([]float32, 2*m*n)
			for i := range want {
				want[i], got[i] = 1, 1
			}
			gemmRef(tc[0], tc[1], m, n, k, 2, a, b, 0.5, want)
			if err := h.Gemm(tc[0], tc[1], m, n, k, 2, addr(a), addr(b), 0.5, addr(got)); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Gemm = %v, want %v", got, want)
			}
			a2, b2 := append(append([]float32{}, a...), a...), append(append([]float32{}, b...), b...)
			if err := h.GemmStridedBatched(tc[0], tc[1], m, n, k, 2, addr(a2), m*k, addr(b2), k*n, R32F, 0, addr(got2), m*n, R32F, 2); err != nil {
				t.Fatal(err)
			}
			ref := make([]float32, m*n)
			gemmRef(tc[0], tc[1], m, n, k, 2, a, b, 0, ref)
			if fmt.Sprint(got2[m*n:]) != fmt.Sprint(ref) {
				t.Fatalf("batched = %v, want %v", got2[m*n:], ref)
			}
		})
	}
	var ce *Error
	err = h.GemmEx(false, false, 2, 2, 2, 1, 0, 0, R16BF, 0, 0, R16F)
	if !errors.As(err, &ce) || ce.Msg != "CUBLAS_STATUS_NOT_SUPPORTED" || ce.Op != "cublasGemmEx" {
		t.Fatalf("fake GemmEx with fp16 output: %v", err)
	}
}

func TestNoCgo(t *testing.T) {
	if dl.Available {
		t.Skip("built with cgo")
	}
	if _, err := Create(); !errors.Is(err, dl.ErrNoCgo) && (err == nil || !contains(err.Error(), "without cgo")) {
		t.Fatalf("Create: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
