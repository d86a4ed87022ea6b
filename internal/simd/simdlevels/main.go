// Command simdlevels prints the SIMD levels this CPU and build run, one per line, best
// first, for make's per-level test runs; on standard error it says which levels it left
// out and why. With -below-best it leaves out the best level too (the plain test run
// already runs at it).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

func main() {
	below := flag.Bool("below-best", false, "leave out the best level")
	flag.Parse()
	fmt.Fprintf(os.Stderr, "simdlevels: CPU %s; best level %s\n", simd.Features(), simd.Detect())
	for i := len(simd.All) - 1; i >= 0; i-- {
		l := simd.All[i]
		if err := simd.Supported(l); err != nil {
			fmt.Fprintf(os.Stderr, "simdlevels: skipping %s: %v\n", l, err)
			continue
		}
		if *below && l == simd.Detect() {
			continue
		}
		fmt.Println(l)
	}
}
