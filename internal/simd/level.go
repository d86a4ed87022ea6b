// Package simd is the project's one home for hand-vectorised kernels: every C kernel of
// nn/ops, models/swin and the optimizers, each at two instruction-set levels (AVX-512 and
// AVX2+FMA), chosen at run time by what the CPU has, with the Go code as the third level;
// and, in its package sse2 (a cgo package cannot hold Go assembly), the SSE2 assembly of
// parallel/comm's reductions and copies, which every amd64 CPU runs.
//
// # Levels
//
// [Detect] reads the CPU's features once (golang.org/x/sys/cpu, which also asks the OS
// whether it saves the wide registers). The active level starts at the best one the CPU and
// the build allow, or at the one the GP_SIMD environment variable names:
//
//	GP_SIMD=avx512   AVX-512 F/DQ/VL/BW with FMA
//	GP_SIMD=avx2     AVX2 with FMA (what most x86-64 CPUs of the last decade have)
//	GP_SIMD=off      the Go code only
//
// A level above what the CPU has, or an unknown value, is refused at start: the process
// prints the CPU's features and the accepted values and exits with status 2, before any
// kernel can run an instruction the CPU lacks. Builds without cgo, the purego tag and
// non-amd64 CPUs have only [Off].
//
// # Contract of the kernels
//
// Each kernel mirrors a Go function of its caller (named in its doc comment) and computes
// the same result bit for bit, or within the ulps its doc comment states. Callers run a
// kernel only while [On] reports true, and run their Go code otherwise; at [Off] a kernel
// does nothing and reports false. Tests compare every level the CPU has with the Go code
// through [Set] (see package simdtest).
package simd

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// Level is an instruction-set level of the kernels, ordered: a CPU that runs a level runs
// every level below it.
type Level int32

const (
	// Off runs the Go code only.
	Off Level = iota
	// AVX2 runs the kernels compiled for AVX2 with FMA.
	AVX2
	// AVX512 runs the kernels compiled for AVX-512 F, DQ, VL and BW with FMA.
	AVX512
)

// String is the level's GP_SIMD spelling: "off", "avx2" or "avx512".
func (l Level) String() string {
	switch l {
	case Off:
		return "off"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("Level(%d)", int32(l))
}

// All is every level, lowest first.
var All = []Level{Off, AVX2, AVX512}

// ParseLevel reads a GP_SIMD value ("off", "avx2" or "avx512", any case; "go" and "none"
// mean off). It does not check that the CPU has the level: see [Supported].
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "go", "none":
		return Off, nil
	case "avx2":
		return AVX2, nil
	case "avx512", "avx-512":
		return AVX512, nil
	}
	return Off, fmt.Errorf("simd: unknown level %q (accepted: avx512, avx2, off)", s)
}

// Detect is the best level this CPU and this build run.
func Detect() Level { return best }

// Supported reports nil if this CPU and this build run level l, else an error that says
// what is missing and names the CPU's features.
func Supported(l Level) error {
	if l < Off || l > AVX512 {
		return fmt.Errorf("simd: no level %d", int32(l))
	}
	if l <= best {
		return nil
	}
	return fmt.Errorf("simd: level %s is not available: %s (this CPU has: %s)", l, whyNot(l), Features())
}

// Current is the active level.
func Current() Level { return Level(active.Load()) }

// On reports whether the kernels run (the active level is above Off); callers run their Go
// code when it is false.
func On() bool { return active.Load() != int32(Off) }

// Set makes l the active level for the whole process and returns a function that restores
// the previous one. It is for tests and benchmarks that compare levels; it fails, changing
// nothing, when the CPU or the build lacks l. Kernels already running finish at the level
// they started at.
func Set(l Level) (restore func(), err error) {
	if err := Supported(l); err != nil {
		return func() {}, err
	}
	prev := active.Swap(int32(l))
	return func() { active.Store(prev) }, nil
}

// Features lists the CPU's SIMD features that the levels use, as /proc/cpuinfo spells them
// ("none" when it has none of them), with the OS and architecture.
func Features() string {
	var f []string
	if runtime.GOARCH == "amd64" {
		for _, x := range []struct {
			name string
			has  bool
		}{
			{"avx", cpu.X86.HasAVX}, {"avx2", cpu.X86.HasAVX2}, {"fma", cpu.X86.HasFMA},
			{"avx512f", cpu.X86.HasAVX512F}, {"avx512dq", cpu.X86.HasAVX512DQ},
			{"avx512vl", cpu.X86.HasAVX512VL}, {"avx512bw", cpu.X86.HasAVX512BW},
			{"avx512_bf16", cpu.X86.HasAVX512BF16},
		} {
			if x.has {
				f = append(f, x.name)
			}
		}
	}
	if len(f) == 0 {
		f = append(f, "none")
	}
	return strings.Join(f, " ") + " (" + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

var (
	best   = detect()
	active atomic.Int32
)

// cpuLevel is the best level the CPU itself runs, whatever the build.
func cpuLevel() Level {
	if runtime.GOARCH != "amd64" {
		return Off
	}
	x := cpu.X86
	if x.HasAVX512F && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512BW && x.HasFMA && x.HasAVX2 {
		return AVX512
	}
	if x.HasAVX2 && x.HasFMA {
		return AVX2
	}
	return Off
}

func detect() Level {
	if !kernelsBuilt {
		return Off
	}
	return cpuLevel()
}

func whyNot(l Level) string {
	if !kernelsBuilt {
		return "this build has no C kernels (built with CGO_ENABLED=0, the purego tag or for " + runtime.GOARCH + ")"
	}
	switch l {
	case AVX512:
		return "the CPU lacks one of avx512f, avx512dq, avx512vl, avx512bw, fma"
	case AVX2:
		return "the CPU lacks avx2 or fma"
	}
	return "unknown level"
}

// envLevel is GP_SIMD's level, or the best one when it is unset or empty.
func envLevel() (Level, error) {
	s, ok := os.LookupEnv("GP_SIMD")
	if !ok || strings.TrimSpace(s) == "" {
		return best, nil
	}
	l, err := ParseLevel(s)
	if err != nil {
		return Off, fmt.Errorf("GP_SIMD=%s: unknown level (accepted: avx512, avx2, off; unset for the best this CPU has, %s); this CPU has: %s", s, best, Features())
	}
	if err := Supported(l); err != nil {
		return Off, fmt.Errorf("GP_SIMD=%s: %v; accepted here: %s", s, err, acceptedHere())
	}
	return l, nil
}

func acceptedHere() string {
	var s []string
	for l := best; l >= Off; l-- {
		if Supported(l) == nil {
			s = append(s, l.String())
		}
	}
	return strings.Join(s, ", ")
}

func init() {
	l, err := envLevel()
	if err != nil {
		// A kernel run at a level the CPU lacks dies of SIGILL somewhere far from the cause:
		// refuse at start instead, naming the cause.
		fmt.Fprintln(os.Stderr, "gorgonia-parallel:", err)
		os.Exit(2)
	}
	active.Store(int32(l))
}
