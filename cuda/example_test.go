//go:build cgo

package cuda_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gorgonia-parallel/gp/cuda"
)

// A matrix product on GPU 0 through cuBLAS: [1 2 3; 4 5 6] times [1 0; 0 1; 1 1]
// (MatMulAutocast is the same product with bf16 or fp16 operands).
//
// go test runs it on the fake driver and cuBLAS that this package's TestMain installs
// (cudatest.Main: host memory as device memory, the GEMM computed on the CPU), the same
// calls a program makes on a GPU. The file builds only with cgo, the one build where the
// CUDA libraries can be loaded at all (without cgo, cuda.Open reports "built without cgo");
// an Example cannot skip, so one that ran without the fakes would fail rather than pass
// without a device.
func Example() {
	d, err := cuda.Open(0)
	if err != nil {
		log.Fatal(err) // no driver: "cuda: NVIDIA driver library libcuda.so.1 ..."
	}
	defer d.Close()
	a, err := d.FromHost([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Free()
	b, err := d.FromHost([]float32{1, 0, 0, 1, 1, 1}, 3, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Free()
	c, err := d.Alloc(cuda.Float32, 2, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Free()
	if err := d.MatMul(c, a, b, false, false, 1, 0); err != nil { // c = 1·a·b + 0·c
		log.Fatal(err)
	}
	v, err := c.ToHost(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v)
	// Output: [4 5 10 11]
}
