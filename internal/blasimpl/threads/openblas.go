//go:build cgo && !purego

package threads

// #cgo LDFLAGS: -lopenblas
// int openblas_get_num_threads(void);
// void openblas_set_num_threads(int);
import "C"

// Set makes OpenBLAS use n threads per call from now on and returns the number it used
// before. It is global to the process.
func Set(n int) (prev int) {
	prev = int(C.openblas_get_num_threads())
	if n != prev {
		C.openblas_set_num_threads(C.int(n))
	}
	return prev
}
