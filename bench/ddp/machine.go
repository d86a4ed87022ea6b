package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Note [What the machine lets two processes keep]
//
// The no-communication ceiling (two plain processes at once against twice one alone) is
// the most DDP can reach where every core runs a rank, and on a shared VM it moves from one
// minute to the next. The probes say, without the model, how much of one process's speed
// the machine itself leaves each of two, for the kinds of work a training step is made of:
// vector products that stay in the core's own caches (the project's kernel and the BLAS), a
// chain of dependent scalar multiply-adds (the core's clock alone), a copy of 4 MiB buffers
// (beyond every current core's L2: the shared last-level cache's bandwidth) and a copy of
// 256 MiB buffers (memory bandwidth). Each probe runs alone, then in two processes at once;
// its pair factor is the mean of the two's rates over the lone rate. The processes start
// their probes at the same wall-clock instants (GP_BENCH_PROBE_AT), so that the pair's
// windows overlap probe by probe.
//
// The factors are the machine's, at the time of the repetition: on a shared VM they move
// from minute to minute (other tenants of the host take the shared cache, memory bandwidth
// and power), and the model's ceiling moves with them. They do not bound the ceiling: a
// model's step, which mixes vector products with memory-bound ops and waits, can keep more
// of its speed in a pair than a probe that runs the vector units flat out. The scalar chain
// tells a slower clock for all work from a slowdown of vector work alone.

// probe is one kind of work the machine shares between processes.
type probe struct {
	name      string // what it does, e.g. "copy 4 MiB"
	exercises string // what of the machine it exercises
	unit      string
	// setup allocates and touches the probe's buffers once, before the timed windows, and
	// returns work, which runs a fixed amount of the probe's work and returns how much it
	// did, in unit.
	setup func() (work func() float64)
}

// probes are the kinds of work, in the order they run.
var probes = []probe{
	{"sgemm 128x128x128", "vector compute in the core's caches, the project's kernel", "GFLOP/s", gemmProbe(128, true)},
	{"BLAS sgemm 128x128x128", "vector compute in the core's caches, the BLAS", "GFLOP/s", gemmProbe(128, false)},
	{"scalar chain", "the core's clock: dependent scalar multiply-adds", "G/s", scalarProbe},
	{"copy 4 MiB", "the shared cache's bandwidth", "GB/s", copyProbe(4 << 20)},
	{"copy 256 MiB", "memory bandwidth", "GB/s", copyProbe(256 << 20)},
}

// gemmProbe multiplies n×n matrices with the project's kernel (own, where the CPU has
// AVX-512; the BLAS otherwise) or the BLAS.
func gemmProbe(n int, own bool) func() func() float64 {
	return func() func() float64 {
		a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
		for i := range a {
			a[i], b[i] = float32(i%7)*0.1, float32(i%5)*0.1
		}
		flop := 2 * float64(n) * float64(n) * float64(n) / 1e9
		impl := blas32.Implementation()
		return func() float64 {
			if !own || !simd.GemmRowsTakes(n, n) || !simd.GemmRows32(false, n, n, n, a, n, b, n, nil, c, n) {
				impl.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, b, n, 0, c, n)
			}
			return flop
		}
	}
}

// copyProbe copies one buffer of size bytes into another; its work is the bytes read and
// written.
func copyProbe(size int) func() func() float64 {
	return func() func() float64 {
		src, dst := make([]float32, size/4), make([]float32, size/4)
		for i := range src {
			src[i] = float32(i)
		}
		copy(dst, src)
		return func() float64 {
			copy(dst, src)
			return 2 * float64(size) / 1e9
		}
	}
}

// scalarProbe runs a chain of dependent scalar multiply-adds, whose speed is the core's
// clock alone; its work is the multiply-adds. The chain lives on in the closure's x from
// call to call, so no call's work is dead.
func scalarProbe() func() float64 {
	x := 1.0
	return func() float64 {
		for range 1 << 20 {
			x = x*1.0000001 + 1e-9
		}
		return float64(1<<20) / 1e9
	}
}

// probeResult is what one probe process reports: each probe's rate, in probes' order.
type probeResult struct {
	Rates []float64 `json:"rates"`
}

// probeWindow is how long each probe runs; probeSlot leaves a gap between windows, so
// that a process that runs a little late still overlaps its peer probe by probe.
// probeLead is how long after the launch the first window starts: time for both processes
// to start and set up every probe's buffers (well under a second here).
const (
	probeWindow = 800 * time.Millisecond
	probeSlot   = 900 * time.Millisecond
	probeLead   = 2 * time.Second
)

// runProbes sets up every probe, runs probe i in the window of length window from
// start+i·slot and returns the rates. Each window times whole units of work, from the first
// unit's start to the last's end, and at least one (a set-up that overran its slot leaves a
// window misaligned, not empty).
func runProbes(start time.Time, window, slot time.Duration) []float64 {
	works := make([]func() float64, len(probes))
	for i, p := range probes {
		works[i] = p.setup()
	}
	rates := make([]float64, len(probes))
	for i, work := range works {
		at := start.Add(time.Duration(i) * slot)
		time.Sleep(time.Until(at))
		end := at.Add(window)
		done := 0.0
		t0 := time.Now()
		for done == 0 || time.Now().Before(end) {
			done += work()
		}
		rates[i] = done / time.Since(t0).Seconds()
	}
	return rates
}

// probeChild is the probe role: it runs the probes from GP_BENCH_PROBE_AT (Unix
// nanoseconds) and prints its rates as one JSON line.
func probeChild() error {
	ns, err := strconv.ParseInt(os.Getenv("GP_BENCH_PROBE_AT"), 10, 64)
	if err != nil {
		return fmt.Errorf("GP_BENCH_PROBE_AT: want the probes' start in Unix nanoseconds: %w", err)
	}
	b, err := json.Marshal(probeResult{Rates: runProbes(time.Unix(0, ns), probeWindow, probeSlot)})
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// machinePair is one measurement of the probes alone and in a pair.
type machinePair struct {
	Alone  []float64 `json:"alone"`
	Pair   []float64 `json:"pair"`   // per process, the mean of the two
	Factor []float64 `json:"factor"` // Pair over Alone
}

// measureMachine runs the probes in one process, then in two at once.
func measureMachine(self string, env []string) (machinePair, error) {
	run := func(n int) ([]probeResult, error) {
		at := time.Now().Add(probeLead).UnixNano()
		return benchutil.Launch[probeResult](n, func(int) []string { return []string{self} }, nil,
			append(env, "GP_BENCH_DDP_ROLE=probe", "GP_BENCH_PROBE_AT="+strconv.FormatInt(at, 10)), time.Minute)
	}
	alone, err := run(1)
	if err != nil {
		return machinePair{}, fmt.Errorf("probes alone: %w", err)
	}
	pair, err := run(2)
	if err != nil {
		return machinePair{}, fmt.Errorf("probes in a pair: %w", err)
	}
	return pairFactors(alone[0].Rates, pair[0].Rates, pair[1].Rates)
}

// pairFactors gives each probe's pair rate (the mean of the two processes') and its factor
// over the lone rate.
func pairFactors(alone, p0, p1 []float64) (machinePair, error) {
	if len(alone) != len(probes) || len(p0) != len(probes) || len(p1) != len(probes) {
		return machinePair{}, fmt.Errorf("probes reported %d, %d and %d rates, want %d each", len(alone), len(p0), len(p1), len(probes))
	}
	m := machinePair{Alone: alone}
	for i := range probes {
		if alone[i] <= 0 {
			return machinePair{}, fmt.Errorf("probe %q alone measured no work", probes[i].name)
		}
		pr := (p0[i] + p1[i]) / 2
		m.Pair, m.Factor = append(m.Pair, pr), append(m.Factor, pr/alone[i])
	}
	return m, nil
}

// String is the pair factors in one line, e.g. "sgemm 128x128x128 0.93, copy 4 MiB 0.52, ...".
func (m machinePair) String() string {
	parts := make([]string, len(m.Factor))
	for i, f := range m.Factor {
		parts[i] = fmt.Sprintf("%s %.2f", probes[i].name, f)
	}
	return strings.Join(parts, ", ")
}

// medianFactors is each probe's median factor over ms, by probe name; nil without any.
func medianFactors(ms []machinePair) map[string]float64 {
	if len(ms) == 0 {
		return nil
	}
	f := make(map[string]float64, len(probes))
	for i, p := range probes {
		var xs []float64
		for _, m := range ms {
			xs = append(xs, m.Factor[i])
		}
		f[p.name] = benchutil.Median(xs)
	}
	return f
}

// probeInfo describes the probes for the result file.
func probeInfo() []map[string]string {
	var info []map[string]string
	for _, p := range probes {
		info = append(info, map[string]string{"name": p.name, "exercises": p.exercises, "unit": p.unit})
	}
	return info
}
