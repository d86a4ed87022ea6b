// Package kernels holds the cuda package's kernels: their source (kernels.cu) and the PTX the
// devices load, embedded (kernels.ptx, committed, so that building needs no nvcc; the driver
// JIT-compiles it for the GPU it runs on) or, when $GP_CUDA_PTX names a file, that file (the
// PTX nvcc built for the GPU of the same run). Load checks that the PTX has an entry point for
// every kernel of kernels.cu and refuses one that lacks any, naming them and the file.
//
// Regenerate the embedded PTX after editing kernels.cu (Debian: apt-get install
// nvidia-cuda-toolkit, from non-free):
//
//	go generate ./cuda/kernels
//
// Without nvcc, clang-ptx.sh compiles kernels.cu with clang's NVPTX backend (a compile check,
// and a PTX that nvcc's replaces on a GPU run).
package kernels

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

//go:generate nvcc -arch=compute_80 -ptx -O3 -o kernels.ptx kernels.cu

// PTXEnv names a PTX file that Load returns instead of the embedded PTX.
const PTXEnv = "GP_CUDA_PTX"

// PTX is the text of kernels.ptx.
//
//go:embed kernels.ptx
var PTX string

// Source is kernels.cu, for the CPU emulator of cuda/cudatest.
//
//go:embed kernels.cu
var Source string

// Embedded is the Origin of the embedded PTX.
const Embedded = "the embedded kernels.ptx"

// ErrMissing is wrapped by Load's error for a PTX that lacks a kernel of kernels.cu.
var ErrMissing = errors.New("kernels: PTX lacks entry points")

// Module is a PTX text and what it holds against what kernels.cu declares.
type Module struct {
	// Origin is the file the PTX was read from, or Embedded.
	Origin string
	// PTX is the text.
	PTX string
	// Kernels are PTX's entry points (its .entry directives), in file order.
	Kernels []string
	// Missing are the kernels of Required that PTX lacks, in Required's order.
	Missing []string
}

// Load returns the PTX the devices load: the file $GP_CUDA_PTX names when it is set, else the
// embedded PTX. A PTX that lacks an entry point for a kernel of Required is refused with an
// error wrapping ErrMissing that names the kernels and the file.
func Load() (Module, error) {
	if p := os.Getenv(PTXEnv); p != "" {
		return LoadFile(p)
	}
	return check(Parse(Embedded, PTX))
}

// LoadFile reads the PTX at path and checks it as Load does.
func LoadFile(path string) (Module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Module{}, fmt.Errorf("kernels: %s=%s: %w", PTXEnv, path, err)
	}
	return check(Parse(path, string(b)))
}

func check(m Module) (Module, error) {
	if len(m.Missing) > 0 {
		return m, fmt.Errorf("%w: %s has no entry point for %s (%d of the %d kernels of kernels.cu); build it from kernels.cu with nvcc (-ptx, as `go generate ./cuda/kernels`) or clang-ptx.sh",
			ErrMissing, m.Origin, strings.Join(m.Missing, ", "), len(m.Missing), len(Required()))
	}
	return m, nil
}

var (
	entry  = regexp.MustCompile(`(?m)^\s*(?:\.visible\s+)?\.entry\s+(\w+)\s*\(`)
	global = regexp.MustCompile(`__global__ void (\w+)\(`)
)

// Parse lists the entry points of ptx and the kernels of Required it lacks; origin names it
// in errors.
func Parse(origin, ptx string) Module {
	m := Module{Origin: origin, PTX: ptx}
	for _, e := range entry.FindAllStringSubmatch(ptx, -1) {
		m.Kernels = append(m.Kernels, e[1])
	}
	for _, k := range Required() {
		if !slices.Contains(m.Kernels, k) {
			m.Missing = append(m.Missing, k)
		}
	}
	return m
}

// Required lists the kernels of kernels.cu (its __global__ functions, all extern "C"), in
// source order: the entry points the cuda package launches.
func Required() []string {
	var out []string
	for _, m := range global.FindAllStringSubmatch(Source, -1) {
		out = append(out, m[1])
	}
	return out
}
