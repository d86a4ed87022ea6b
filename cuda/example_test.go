package cuda_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gorgonia-parallel/gp/cuda"
)

// A matrix product on the GPU. It needs a GPU and cgo, so it is compiled but not run by go
// test; cuda/gpucheck runs the same calls on a GPU.
func Example() {
	d, err := cuda.Open(0)
	if err != nil {
		log.Fatal(err) // e.g. "cuda: NVIDIA driver library libcuda.so.1 ...: built without cgo"
	}
	defer d.Close()
	a, _ := d.FromHost([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b, _ := d.FromHost([]float32{1, 0, 0, 1, 1, 1}, 3, 2)
	c, _ := d.Alloc(cuda.Float32, 2, 2)
	defer a.Free()
	defer b.Free()
	defer c.Free()
	if err := d.MatMul(c, a, b, false, false, 1, 0); err != nil { // float32 through cuBLAS
		log.Fatal(err)
	}
	if err := d.MatMulAutocast(c, a, b, false, false, cuda.BF16); err != nil { // bf16 operands
		log.Fatal(err)
	}
	v, _ := c.ToHost(context.Background())
	fmt.Println(v) // [4 5 10 11]
}
