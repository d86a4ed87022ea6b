// Command fakelibs builds cuda/cudatest's fake libcuda, cuBLAS, cuDNN and NCCL and the CPU
// emulator of kernels.cu into a folder, for `EMULATE=1 run.sh` of the GPU check (build.sh
// runs it when EMULATE=1): the whole GPU check, trainer runs included, on a machine without
// a GPU. It needs cgo, a C and a C++ compiler.
//
//	go run ./cuda/gpucheck/fakelibs DIR
package main

import (
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/cuda/cudatest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fakelibs DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if !cudatest.Cgo {
		fmt.Fprintln(os.Stderr, "fakelibs: built without cgo: the fake libraries could not be loaded")
		os.Exit(1)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "fakelibs:", err)
		os.Exit(1)
	}
	if _, _, err := cudatest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "fakelibs:", err)
		os.Exit(1)
	}
	if _, err := cudatest.BuildEmulator(dir); err != nil {
		fmt.Fprintln(os.Stderr, "fakelibs:", err)
		os.Exit(1)
	}
}
