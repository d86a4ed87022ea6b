// Command ops benchmarks the convolution ops of nn/ops against the GEMM roof of the BLAS in
// use: for each convolution it times forward + backward (dx, dw) through the ops' own Do
// methods, and the same three GEMMs alone at the same shapes (the roof the convolution could
// reach if im2col, col2im and the bookkeeping cost nothing).
//
// Usage: go run ./bench/ops [-threads 1,2] [-reps 5] [-out bench/results/ops.json]
//
// It prints a table and ends with one JSON line, also written to -out. BLAS threads come
// from OPENBLAS_NUM_THREADS (make bench-ops sets 1); -threads reruns the command once per
// value and reports each.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// convSpec is one benchmarked convolution.
type convSpec struct {
	Name            string
	N, C, H, W      int
	O, K            int
	Stride, Padding int
}

var specs = []convSpec{
	{"3x3 64->64 32x64x32x32", 32, 64, 32, 32, 64, 3, 1, 1},
	{"3x3 256->256 16x256x8x8", 16, 256, 8, 8, 256, 3, 1, 1},
	{"1x1 256->64 16x256x16x16", 16, 256, 16, 16, 64, 1, 1, 0},
	{"7x7 s2 3->64 16x3x64x64", 16, 3, 64, 64, 64, 7, 2, 3},
}

// ConvResult is one row of the table.
type ConvResult struct {
	Name         string  `json:"name"`
	GFLOPs       float64 `json:"gflop_per_call"`
	FwdBwdMs     float64 `json:"fwd_bwd_ms"`
	FwdBwdGFLOPS float64 `json:"fwd_bwd_gflops"`
	RoofGFLOPS   float64 `json:"gemm_roof_gflops"`
	PctOfRoof    float64 `json:"pct_of_gemm_roof"`
	PctOfSquare  float64 `json:"pct_of_sgemm_1024"`
	BytesPerCall float64 `json:"bytes_alloc_per_call"`
}

// Report is the JSON line. The file's top level also has the run's Provenance and Units;
// a -child's line (and so each PerThreads entry) has neither.
type Report struct {
	*benchutil.Provenance
	Units       map[string]string `json:"units,omitempty"`
	Bench       string            `json:"bench"`
	BLAS        string            `json:"blas"`
	Threads     int               `json:"blas_threads"`
	GOMAXPROCS  int               `json:"gomaxprocs"`
	SquareGEMM  float64           `json:"sgemm_1024_gflops"`
	Convs       []ConvResult      `json:"convs"`
	MinPct      float64           `json:"min_pct_of_gemm_roof"`
	Note        string            `json:"note"`
	PerThreads  []Report          `json:"per_threads,omitempty"`
	GeneratedAt string            `json:"generated_at,omitempty"`
}

func main() {
	threads := flag.String("threads", "", "comma-separated OPENBLAS_NUM_THREADS values to run, each in a child process (default: the current setting only)")
	reps := flag.Int("reps", 5, "timed repetitions per measurement (the best is kept)")
	out := flag.String("out", "bench/results/ops.json", "JSON output file (empty: none)")
	child := flag.Bool("child", false, "internal: print only the JSON line")
	flag.Parse()
	if err := run(*threads, *reps, *out, *child); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ops:", err)
		os.Exit(1)
	}
}

func run(threads string, reps int, out string, child bool) error {
	var prov *benchutil.Provenance // a child's line has none
	if !child {
		p := benchutil.Start("ops", os.Args[1:])
		prov = &p
	}
	var rep Report
	if threads == "" {
		r, err := measure(reps, !child)
		if err != nil {
			return err
		}
		rep = r
	} else {
		for _, t := range strings.Split(threads, ",") {
			if _, err := strconv.Atoi(t); err != nil {
				return fmt.Errorf("-threads %q: %w", threads, err)
			}
			r, err := runChild(t, reps)
			if err != nil {
				return fmt.Errorf("OPENBLAS_NUM_THREADS=%s: %w", t, err)
			}
			printTable(r)
			rep.PerThreads = append(rep.PerThreads, r)
		}
		rep.Bench, rep.BLAS, rep.Note = "ops", rep.PerThreads[0].BLAS, rep.PerThreads[0].Note
		rep.Threads, rep.SquareGEMM, rep.Convs, rep.MinPct = rep.PerThreads[0].Threads, rep.PerThreads[0].SquareGEMM, rep.PerThreads[0].Convs, rep.PerThreads[0].MinPct
		rep.GOMAXPROCS = rep.PerThreads[0].GOMAXPROCS
	}
	rep.GeneratedAt = time.Now().UTC().Format(time.RFC3339)
	if prov != nil {
		prov.End()
		rep.Provenance, rep.Units = prov, units
	}
	if out != "" && prov != nil {
		return prov.Save(os.Stdout, out, rep)
	}
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// units says the unit of the fields whose names do not.
var units = map[string]string{
	"sgemm_1024_gflops": "GFLOP/s (10^9 floating-point operations per second)",
	"fwd_bwd_gflops":    "GFLOP/s (so is gemm_roof_gflops)",
	"gflop_per_call":    "GFLOP (10^9 floating-point operations) of one forward and backward",
	"pct_of_gemm_roof":  "percent of gemm_roof_gflops (pct_of_sgemm_1024: of sgemm_1024_gflops)",
}

// runChild reruns this binary with OPENBLAS_NUM_THREADS=t and parses its JSON line.
func runChild(t string, reps int) (Report, error) {
	var r Report
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	cmd := exec.Command(exe, "-child", "-reps", strconv.Itoa(reps))
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+t)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return r, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return r, json.Unmarshal([]byte(lines[len(lines)-1]), &r)
}

func measure(reps int, print bool) (Report, error) {
	rep := Report{Bench: "ops", BLAS: blasimpl.Name(), Threads: blasimpl.Threads(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Note: "float32; forward+backward = y, dx, dw through the ops' Do (no bias); roof = the same three GEMMs per image without im2col/col2im (SGEMM1024: square 1024^3); best of reps; the machine is shared, numbers are noisy"}
	rep.SquareGEMM = squareGEMM(1024, reps)
	if print {
		fmt.Printf("BLAS %s, %d thread(s) (0 = gonum, goroutines), GOMAXPROCS %d\n", rep.BLAS, rep.Threads, rep.GOMAXPROCS)
		fmt.Printf("SGEMM 1024x1024x1024: %.1f GFLOP/s\n\n", rep.SquareGEMM)
	}
	rep.MinPct = 1e9
	for _, s := range specs {
		r, err := benchConv(s, reps)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", s.Name, err)
		}
		r.PctOfSquare = 100 * r.FwdBwdGFLOPS / rep.SquareGEMM
		rep.Convs = append(rep.Convs, r)
		rep.MinPct = min(rep.MinPct, r.PctOfRoof)
	}
	if print {
		printTable(rep)
	}
	return rep, nil
}

func printTable(rep Report) {
	fmt.Printf("conv2d forward+backward, float32, BLAS %s with %d thread(s)\n", rep.BLAS, rep.Threads)
	fmt.Printf("%-26s %8s %9s %9s %13s %8s %11s %11s\n", "conv", "GFLOP", "ms", "GFLOP/s", "roof GFLOP/s", "% roof", "% SGEMM1024", "bytes/call")
	for _, r := range rep.Convs {
		fmt.Printf("%-26s %8.3f %9.2f %9.1f %13.1f %7.1f%% %10.1f%% %11.0f\n", r.Name, r.GFLOPs, r.FwdBwdMs, r.FwdBwdGFLOPS, r.RoofGFLOPS, r.PctOfRoof, r.PctOfSquare, r.BytesPerCall)
	}
	fmt.Printf("minimum: %.1f%% of the GEMM roof (goal >= 60%%)\n\n", rep.MinPct)
}

// best returns the shortest of reps timings of f (after one warm-up call).
func best(reps int, f func()) time.Duration {
	f()
	b := time.Duration(1<<63 - 1)
	for i := 0; i < reps; i++ {
		t0 := time.Now()
		f()
		b = min(b, time.Since(t0))
	}
	return b
}

func randF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func squareGEMM(n, reps int) float64 {
	rng := rand.New(rand.NewSource(1))
	a, b, c := randF32(rng, n*n), randF32(rng, n*n), make([]float32, n*n)
	impl := blas32.Implementation()
	d := best(reps, func() { impl.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, b, n, 0, c, n) })
	return 2 * float64(n*n*n) / d.Seconds() / 1e9
}

func benchConv(s convSpec, reps int) (ConvResult, error) {
	rng := rand.New(rand.NewSource(2))
	res := ConvResult{Name: s.Name}
	g := G.NewGraph()
	xv := tensor.New(tensor.WithShape(s.N, s.C, s.H, s.W), tensor.WithBacking(randF32(rng, s.N*s.C*s.H*s.W)))
	wv := tensor.New(tensor.WithShape(s.O, s.C, s.K, s.K), tensor.WithBacking(randF32(rng, s.O*s.C*s.K*s.K)))
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(xv.Shape()...), G.WithName("x"), G.WithValue(xv))
	w := G.NewTensor(g, tensor.Float32, 4, G.WithShape(wv.Shape()...), G.WithName("w"), G.WithValue(wv))
	y, err := ops.Conv2d(x, w, nil, ops.ConvOpts{Stride: [2]int{s.Stride, s.Stride}, Padding: [2]int{s.Padding, s.Padding}})
	if err != nil {
		return res, err
	}
	cost, err := G.Sum(y)
	if err != nil {
		return res, err
	}
	grads, err := G.Grad(cost, x, w)
	if err != nil {
		return res, err
	}
	ys := y.Shape()
	dyv := tensor.New(tensor.WithShape(ys...), tensor.WithBacking(randF32(rng, ys.TotalSize())))
	fwd, dxOp, dwOp := y.Op(), grads[0].Op(), grads[1].Op()
	var stepErr error
	step := func() {
		if _, err := fwd.Do(xv, wv); err != nil {
			stepErr = err
		}
		if _, err := dxOp.Do(wv, dyv); err != nil {
			stepErr = err
		}
		if _, err := dwOp.Do(xv, dyv); err != nil {
			stepErr = err
		}
	}
	d := best(reps, step)
	if stepErr != nil {
		return res, stepErr
	}
	const calls = 3
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := 0; i < calls; i++ {
		step()
	}
	runtime.ReadMemStats(&m1)
	res.BytesPerCall = float64(m1.TotalAlloc-m0.TotalAlloc) / calls

	P, Kd := ys[2]*ys[3], s.C*s.K*s.K
	flop := 3 * 2 * float64(s.N) * float64(s.O) * float64(P) * float64(Kd)
	res.GFLOPs = flop / 1e9
	res.FwdBwdMs = d.Seconds() * 1e3
	res.FwdBwdGFLOPS = flop / d.Seconds() / 1e9

	// The roof: the same three GEMMs per image, on buffers of the same sizes.
	impl := blas32.Implementation()
	wm, col, ym, dw := randF32(rng, s.O*Kd), randF32(rng, Kd*P), randF32(rng, s.O*P), make([]float32, s.O*Kd)
	roof := best(reps, func() {
		for n := 0; n < s.N; n++ {
			impl.Sgemm(blas.NoTrans, blas.NoTrans, s.O, P, Kd, 1, wm, Kd, col, P, 0, ym, P)
			impl.Sgemm(blas.Trans, blas.NoTrans, Kd, P, s.O, 1, wm, Kd, ym, P, 0, col, P)
			impl.Sgemm(blas.NoTrans, blas.Trans, s.O, Kd, P, 1, ym, P, col, P, 1, dw, Kd)
		}
	})
	res.RoofGFLOPS = flop / roof.Seconds() / 1e9
	res.PctOfRoof = 100 * res.FwdBwdGFLOPS / res.RoofGFLOPS
	return res, nil
}
