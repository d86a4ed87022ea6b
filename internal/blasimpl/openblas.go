//go:build cgo && !purego

package blasimpl

// #cgo LDFLAGS: -lopenblas
// int openblas_get_num_threads(void);
import "C"

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

const name = "openblas"

func init() {
	impl := netlib.Implementation{}
	blas32.Use(impl)
	blas64.Use(impl)
	G.Use(impl)
}

// Threads reports the number of threads OpenBLAS uses (OPENBLAS_NUM_THREADS).
func Threads() int { return int(C.openblas_get_num_threads()) }
