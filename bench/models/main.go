// Command models (make bench-models) measures training images/s (forward, backward and an
// SGD-with-momentum step) of resnet18 and resnet50 at 64x64, batch 16, and swin_t at
// 224x224, batch 8, with 1 and 2 threads, next to PyTorch (Debian's torch through
// /usr/bin/python3, bench/models/torch_bench.py) on the same inputs in the same run, and
// how close each side comes to the machine's limit: the model's training FLOPs per image
// against OpenBLAS's sgemm measured in the same run at the row's threads (Note [Training
// FLOPs and the roof], roof.go). It prints a table and a JSON line and writes
// bench/results/models.json.
//
// -simd avx2,avx512 (or "all") measures our side at each SIMD level the CPU has, one table a
// level (GP_SIMD in the children), every row still paired with PyTorch's in the same run.
//
// Each row is the median of -reps (default 5) measurement pairs and its ratio the median of
// the pairs' ratios. Each side runs in one live child process per row with its compute
// threads set to the row's count: GP_NUM_THREADS (our kernels and every split of our step)
// and OPENBLAS_NUM_THREADS and OMP_NUM_THREADS (OpenBLAS reads its thread count at start-up;
// torch.set_num_threads in the PyTorch child). Our child leaves GOMAXPROCS at Go's default,
// the machine's cores, as gprun's ranks and any Go program do: GOMAXPROCS is the Go
// scheduler's, not a compute thread count (Note [A spare P]). Each side's CPU seconds per
// step (every thread) are in the row. A pair is one timed window of each, back to back, the
// order alternating
// (Note [Alternated windows], alternate.go). A window times at least -min-seconds (default
// 4) of steps: a resnet18 step takes 0.15 s, and a handful of steps moved a row by ±20% on
// this shared machine.
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Row is one row of bench/results/models.json (under "rows"). TorchImgsPerS and Ratio are null when
// PyTorch could not run; Torch then says why.
type Row struct {
	Arch          string   `json:"arch"`
	SIMD          string   `json:"simd"` // our kernels' level (GP_SIMD) in this row
	Threads       int      `json:"threads"`
	GoMaxProcs    int      `json:"gomaxprocs"` // our child's (Note [A spare P])
	ImgsPerS      float64  `json:"imgs_per_s"`
	TorchImgsPerS *float64 `json:"torch_imgs_per_s"`
	Ratio         *float64 `json:"ratio"`
	Batch         int      `json:"batch"`
	Size          int      `json:"size"`
	Torch         string   `json:"torch,omitempty"`
	// CPU seconds (user+system, every thread) per training step: less sensitive than
	// images/s to other load on a shared machine.
	CPUPerStep      float64  `json:"cpu_s_per_step"`
	TorchCPUPerStep *float64 `json:"torch_cpu_s_per_step"`
	// Reps is the number of (ours, PyTorch) measurement pairs; the figures above are their
	// medians, Ratio the median of RatioPerRep.
	Reps        int       `json:"reps"`
	RatioPerRep []float64 `json:"ratio_per_rep,omitempty"`
	// FlopsPerImage is the training FLOPs of the model's products per image, RoofGFLOPs the
	// median of the machine's sgemm at this row's threads measured after each pair
	// (RoofPerRep), RoofFraction and TorchRoofFraction the medians of how much of each
	// repetition's roof each side's img/s reach (Note [Training FLOPs and the roof]).
	FlopsPerImage     float64            `json:"flops_per_image"`
	FlopsByKind       map[string]float64 `json:"flops_per_image_by_kind"`
	RoofGFLOPs        float64            `json:"roof_gflops"`
	RoofPerRep        []float64          `json:"roof_gflops_per_rep,omitempty"`
	RoofSquareGFLOPs  float64            `json:"roof_square_gflops"`
	RoofModelGFLOPs   float64            `json:"roof_model_shape_gflops"`
	RoofOwnGFLOPs     float64            `json:"roof_own_kernel_gflops,omitempty"`
	RoofOwnSqGFLOPs   float64            `json:"roof_own_kernel_square_gflops,omitempty"`
	RoofFraction      float64            `json:"roof_fraction"`
	TorchRoofFraction *float64           `json:"torch_roof_fraction"`
}

// rowUnits says the unit of the Row fields whose names do not.
var rowUnits = map[string]string{
	"batch":           "images per step",
	"threads":         "compute threads of each side: GP_NUM_THREADS, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS (torch.set_num_threads); gomaxprocs is our child's GOMAXPROCS, Go's default (Note [A spare P])",
	"size":            "pixels per side",
	"ratio":           "our images/s over PyTorch's (ratio_per_rep: each pair's)",
	"flops_per_image": "floating-point operations of a training step's products per image (flops_per_image_by_kind: the same by kind of op)",
	"roof_fraction":   "fraction of roof_gflops that img/s times flops_per_image reaches (torch_roof_fraction: PyTorch's)",
	"roof_gflops":     "GFLOP/s (10^9 per second) of the fastest GEMM in the process at this row's threads: the BLAS's sgemm on a 2048^3 square (roof_square_gflops) and on the model's largest product (roof_model_shape_gflops), the project's AVX-512 kernel on that product (roof_own_kernel_gflops) and on the square (roof_own_kernel_square_gflops); so are the other roof_ fields",
}

type workload struct {
	arch          string
	batch, size   int
	warmup, steps int
}

var workloads = []workload{
	{"resnet18", 16, 64, 2, 5},
	{"resnet50", 16, 64, 2, 3},
	{"swin_t", 8, 224, 1, 2},
}

func main() {
	child := flag.String("child", "", "internal: measure one architecture in this process")
	batch := flag.Int("batch", 0, "internal: batch size of -child")
	size := flag.Int("size", 0, "internal: image side of -child")
	warmup := flag.Int("warmup", 1, "internal: untimed steps of -child")
	steps := flag.Int("steps", 3, "internal: timed steps of -child")
	threadList := flag.String("threads", "1,2", "thread counts to measure")
	archs := flag.String("archs", "", "comma-separated subset of resnet18,resnet50,swin_t (default all)")
	out := flag.String("out", "bench/results/models.json", "result file")
	levels := flag.String("simd", "", "comma-separated SIMD levels of our kernels to measure, each a table (avx512, avx2, off; default the best this CPU has); \"all\" for every level the CPU has")
	profile := flag.String("cpuprofile", "", "internal: write a CPU profile of -child's timed steps")
	serveMode := flag.Bool("serve", false, "internal: -child stays alive and times one window per line of stdin")
	opProfile := flag.String("profile", "", "instead of the table: profile our training step of each arch at one thread and write where its time goes, by op and by kernel, to this JSON file (e.g. bench/results/models-profile.json)")
	roof := flag.String("roof", "", "internal: print sgemm's GFLOP/s on a 2048³ square and on this M,N,K product")
	flag.IntVar(&reps, "reps", 5, "measurement pairs (a window of ours and one of PyTorch's, alternated in two live processes) per row; the table shows medians")
	flag.Float64Var(&minSeconds, "min-seconds", 4, "each window times at least this long (and at least the workload's steps), ours and PyTorch's alike")
	flag.Parse()
	if *roof != "" {
		var m, n, k int
		if _, err := fmt.Sscanf(*roof, "%d,%d,%d", &m, &n, &k); err != nil {
			fmt.Fprintln(os.Stderr, "bench/models: -roof:", err)
			os.Exit(2)
		}
		if err := roofChild(m, n, k); err != nil {
			fmt.Fprintln(os.Stderr, "bench/models:", err)
			os.Exit(1)
		}
		return
	}
	if *child != "" && *serveMode {
		if err := serve(*child, *batch, *size, *warmup, *steps); err != nil {
			fmt.Fprintln(os.Stderr, "bench/models:", err)
			os.Exit(1)
		}
		return
	}
	if *child != "" {
		var startErr error
		if *profile != "" {
			afterWarmup = func() {
				f, err := os.Create(*profile)
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				startErr = err
			}
			defer pprof.StopCPUProfile()
		}
		ips, cpu, err := measure(*child, *batch, *size, *warmup, *steps)
		if err == nil && startErr != nil {
			err = fmt.Errorf("-cpuprofile: %w", startErr)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/models:", err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		fmt.Println(ips, cpu)
		return
	}
	if *opProfile != "" {
		if err := profileAll(*archs, *opProfile); err != nil {
			fmt.Fprintln(os.Stderr, "bench/models:", err)
			os.Exit(1)
		}
		return
	}
	lv, err := simdLevels(*levels)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/models:", err)
		os.Exit(2)
	}
	if err := parent(lv, *threadList, *archs, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench/models:", err)
		os.Exit(1)
	}
}

// afterWarmup, when set, runs in a -child between the warm-up and the timed steps (it
// starts -cpuprofile's profile, so that the profile holds training steps only).
var afterWarmup func()

// reps is -reps; minSeconds is -min-seconds (passed on to the children).
var (
	reps       int
	minSeconds float64
)

// simdLevels parses -simd: the levels to measure, each one this CPU and build run.
func simdLevels(s string) ([]simd.Level, error) {
	if s == "" {
		return []simd.Level{simd.Detect()}, nil
	}
	if s == "all" {
		var all []simd.Level
		for i := len(simd.All) - 1; i >= 0; i-- {
			if simd.Supported(simd.All[i]) == nil {
				all = append(all, simd.All[i])
			}
		}
		return all, nil
	}
	var lv []simd.Level
	for _, p := range strings.Split(s, ",") {
		l, err := simd.ParseLevel(p)
		if err != nil {
			return nil, fmt.Errorf("-simd: %w", err)
		}
		if err := simd.Supported(l); err != nil {
			return nil, fmt.Errorf("-simd %s: %w", p, err)
		}
		lv = append(lv, l)
	}
	return lv, nil
}

func parent(levels []simd.Level, threadList, archs, out string) error {
	prov := benchutil.Start("models", os.Args[1:])
	tmp, err := os.MkdirTemp("", "bench-models")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var rows []Row
	fmt.Printf("BLAS: %s (%s kernels; PyTorch's OpenBLAS given OPENBLAS_CORETYPE=%s); PyTorch: oneDNN convolutions\n", blasimpl.Name(), blasimpl.Core(),
		cmp.Or(os.Getenv("OPENBLAS_CORETYPE"), blasimpl.Core()))
	fmt.Printf("CPU: %s\n", simd.Features())
	for _, lv := range levels {
		r, err := measureLevel(lv, tmp, self, threadList, archs)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	prov.End()
	return prov.Save(os.Stdout, out, benchutil.Rows[Row]{Provenance: prov, Units: rowUnits, Rows: rows})
}

// measureLevel prints and returns one table: every workload and thread count with our
// kernels at SIMD level lv (GP_SIMD in the children), each next to PyTorch.
func measureLevel(lv simd.Level, tmp, self, threadList, archs string) ([]Row, error) {
	var rows []Row
	fmt.Printf("\nour SIMD level: %s\n", lv)
	fmt.Printf("%-9s %7s %5s %4s %12s %14s %9s %12s %14s %10s %10s %9s %9s\n", "arch", "threads", "batch", "size", "go img/s", "torch img/s", "go/torch",
		"go cpu s/st", "torch cpu s/st", "GFLOP/img", "roof GF/s", "go roof", "torch roof")
	for _, w := range workloads {
		if archs != "" && !strings.Contains(","+archs+",", ","+w.arch+",") {
			continue
		}
		xp, yp, err := writeInputs(tmp, w)
		if err != nil {
			return nil, err
		}
		fl, err := countFlops(w.arch, w.batch, w.size)
		if err != nil {
			return nil, fmt.Errorf("%s: counting FLOPs: %w", w.arch, err)
		}
		for _, ts := range strings.Split(threadList, ",") {
			t, err := strconv.Atoi(strings.TrimSpace(ts))
			if err != nil || t < 1 {
				return nil, fmt.Errorf("bad thread count %q", ts)
			}
			procs := max(t, runtime.NumCPU()) // Go's default, or t where t is more (Note [A spare P])
			env := append(childEnv(), fmt.Sprintf("GOMAXPROCS=%d", procs), fmt.Sprintf("GP_NUM_THREADS=%d", t),
				fmt.Sprintf("OPENBLAS_NUM_THREADS=%d", t), fmt.Sprintf("OMP_NUM_THREADS=%d", t), "GP_SIMD="+lv.String())
			// reps pairs of windows from two live processes, ours and PyTorch's, alternated
			// (Note [Alternated windows]); the row reports medians and the median of the
			// per-pair ratios.
			var gos, gcpus, tvs, tcpus, ratios, roofs, goFracs, torchFracs []float64
			var rfs []roofReport
			steps, warm := fmt.Sprint(w.steps), fmt.Sprint(w.warmup)
			ours, err := startServer(env, self, "-child", w.arch, "-batch", fmt.Sprint(w.batch), "-size", fmt.Sprint(w.size),
				"-warmup", warm, "-steps", steps, "-min-seconds", fmt.Sprint(minSeconds), "-serve")
			if err != nil {
				return nil, fmt.Errorf("%s, %d threads, simd %s: %w", w.arch, t, lv, err)
			}
			torch, terr := startServer(benchutil.TorchEnv(env, blasimpl.Core()), "/usr/bin/python3", "bench/models/torch_bench.py", w.arch, fmt.Sprint(t), xp, yp,
				warm, steps, fmt.Sprint(minSeconds), "serve")
			for i := range reps {
				goOut, goCPU, tv, tCPU, err := pair(ours, torch, terr, i%2 == 1)
				if err != nil {
					ours.close()
					torch.close()
					return nil, fmt.Errorf("%s, %d threads, simd %s: %w", w.arch, t, lv, err)
				}
				gos, gcpus = append(gos, goOut), append(gcpus, goCPU)
				if terr == nil && tv < 0 { // PyTorch failed in this window: ours alone from here
					terr = torch.err
				}
				if terr == nil {
					tvs, tcpus, ratios = append(tvs, tv), append(tcpus, tCPU), append(ratios, goOut/tv)
				}
				// The roof is measured in every repetition, right after the pair it divides:
				// this shared machine's speed moves within a run (Note [Training FLOPs and
				// the roof]).
				rf, err := runRoof(env, self, fl)
				if err != nil {
					ours.close()
					torch.close()
					return nil, fmt.Errorf("%s, %d threads: sgemm roof: %w", w.arch, t, err)
				}
				roof := rf.best() * 1e9
				rfs, roofs = append(rfs, rf), append(roofs, roof/1e9)
				goFracs = append(goFracs, goOut*fl.PerImage/roof)
				if terr == nil {
					torchFracs = append(torchFracs, tv*fl.PerImage/roof)
				}
			}
			if err := ours.close(); err != nil {
				return nil, fmt.Errorf("%s, %d threads, simd %s: %w", w.arch, t, lv, err)
			}
			torch.close()
			goOut, goCPU := benchutil.Median(gos), benchutil.Median(gcpus)
			row := Row{Arch: w.arch, SIMD: lv.String(), Threads: t, GoMaxProcs: procs, ImgsPerS: goOut, Batch: w.batch, Size: w.size, CPUPerStep: goCPU, Reps: reps, RatioPerRep: ratios,
				FlopsPerImage: fl.PerImage, FlopsByKind: fl.ByKind}
			row.RoofGFLOPs, row.RoofPerRep = benchutil.Median(roofs), roofs
			row.RoofSquareGFLOPs = benchutil.Median(pick(rfs, func(r roofReport) float64 { return r.Square }))
			row.RoofModelGFLOPs = benchutil.Median(pick(rfs, func(r roofReport) float64 { return r.Model }))
			row.RoofOwnGFLOPs = benchutil.Median(pick(rfs, func(r roofReport) float64 { return r.Own }))
			row.RoofOwnSqGFLOPs = benchutil.Median(pick(rfs, func(r roofReport) float64 { return r.OwnSquare }))
			row.RoofFraction = benchutil.Median(goFracs)
			torchCol, ratioCol := "", ""
			if terr != nil {
				row.Torch = "unavailable: " + benchutil.FirstLine(terr.Error())
				torchCol, ratioCol = "n/a (no torch)", "n/a"
			} else {
				tv, tCPU, r := benchutil.Median(tvs), benchutil.Median(tcpus), benchutil.Median(ratios)
				row.TorchImgsPerS, row.Ratio, row.TorchCPUPerStep = &tv, &r, &tCPU
				tf := benchutil.Median(torchFracs)
				row.TorchRoofFraction = &tf
				torchCol, ratioCol = fmt.Sprintf("%.2f", tv), fmt.Sprintf("%.2fx", r)
			}
			tCPU := 0.0
			if row.TorchCPUPerStep != nil {
				tCPU = *row.TorchCPUPerStep
			}
			torchCPU := "n/a"
			if row.TorchCPUPerStep != nil {
				torchCPU = fmt.Sprintf("%.3f", tCPU)
			}
			torchRoof := "n/a"
			if row.TorchRoofFraction != nil {
				torchRoof = fmt.Sprintf("%.2f", *row.TorchRoofFraction)
			}
			fmt.Printf("%-9s %7d %5d %4d %12.2f %14s %9s %12.3f %14s %10.2f %10.1f %9.2f %9s\n", w.arch, t, w.batch, w.size, goOut, torchCol, ratioCol, goCPU, torchCPU,
				fl.PerImage/1e9, row.RoofGFLOPs, row.RoofFraction, torchRoof)
			rows = append(rows, row)
		}
		fmt.Printf("  %s: %.2f GFLOP per training image: %s; largest forward product %dx%d by %dx%d\n", w.arch, fl.PerImage/1e9,
			topKinds(fl.ByKind, 4), fl.M, fl.K, fl.K, fl.N)
	}
	return rows, nil
}

// runRoof measures sgemm in a child with env's thread count (OpenBLAS reads it at start).
func runRoof(env []string, self string, fl flopsReport) (roofReport, error) {
	cmd := exec.Command(self, "-roof", fmt.Sprintf("%d,%d,%d", fl.M, fl.N, fl.K))
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return roofReport{}, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var r roofReport
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return roofReport{}, fmt.Errorf("roof child printed %q: %w", out, err)
	}
	return r, nil
}

// writeInputs writes the images and labels both sides train on, as .npy files.
func writeInputs(dir string, w workload) (string, string, error) {
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, w.batch*3*w.size*w.size)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, w.batch)
	for i := range y {
		y[i] = float32(rng.Intn(1000))
	}
	xp, yp := filepath.Join(dir, w.arch+"_x.npy"), filepath.Join(dir, w.arch+"_y.npy")
	if err := checkpoint.SaveArray(xp, nn.StateEntry{Shape: []int{w.batch, 3, w.size, w.size}, F32: x}); err != nil {
		return "", "", err
	}
	return xp, yp, checkpoint.SaveArray(yp, nn.StateEntry{Shape: []int{w.batch}, F32: y})
}

// runChild runs a measuring process and parses its last line: images/s, then CPU seconds
// (user+system, all threads) per step.
func runChild(env []string, name string, args ...string) (ips, cpu float64, err error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%s printed %q, want images/s and CPU s/step", filepath.Base(name), lines[len(lines)-1])
	}
	if ips, err = strconv.ParseFloat(f[0], 64); err != nil {
		return 0, 0, err
	}
	cpu, err = strconv.ParseFloat(f[1], 64)
	return ips, cpu, err
}

// stepper is one training step of a model on the inputs the parent wrote (regenerated here
// from the same seed): forward, backward and SGD with momentum, as PyTorch's side.
type stepper struct {
	batch int
	step  func() error
	close func()
}

// newStepper builds arch (1000 classes, seed 0) at batch and size.
func newStepper(arch string, batch, size int) (*stepper, error) {
	mod, err := models.New(arch, 1000)
	if err != nil {
		return nil, err
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		return nil, err
	}
	p, err := nn.Compile(m, nn.Classify(batch, []int{3, size, size}, 0))
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(1))
	x, _ := p.Input("images")
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y, _ := p.Input("labels")
	for i := range y {
		y[i] = float32(rng.Intn(1000))
	}
	mom := make([]float32, len(m.Params.Data))
	step := func() error {
		m.Params.ZeroGrad()
		if err := p.Run(context.Background()); err != nil {
			return err
		}
		sgdMomentum(m.Params.Data, m.Params.Grad, mom, 0.01, 0.9)
		return nil
	}
	return &stepper{batch: batch, step: step, close: func() { p.Close() }}, nil
}

// window times at least steps steps and at least minSeconds, and returns images/s and CPU
// seconds (user+system, every thread) per step.
func (s *stepper) window(steps int) (ips, cpuPerStep float64, err error) {
	cpu0 := benchutil.CPUSeconds()
	start := time.Now()
	done := 0
	for done < steps || time.Since(start).Seconds() < minSeconds {
		if err := s.step(); err != nil {
			return 0, 0, err
		}
		done++
	}
	ips = float64(s.batch*done) / time.Since(start).Seconds()
	return ips, (benchutil.CPUSeconds() - cpu0) / float64(done), nil
}

// measure builds arch, runs warmup untimed steps and times one window.
func measure(arch string, batch, size, warmup, steps int) (ips, cpuPerStep float64, err error) {
	s, err := newStepper(arch, batch, size)
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	for range warmup {
		if err := s.step(); err != nil {
			return 0, 0, err
		}
	}
	if afterWarmup != nil {
		afterWarmup()
	}
	return s.window(steps)
}

// serve builds arch, runs warmup untimed steps, prints "ready", then answers each line of
// stdin with one untimed step (caches refilled after the other side's window) and one timed
// window, printed as images/s and CPU s/step; it returns at the end of stdin. The parent
// keeps both sides alive and alternates their windows (Note [Alternated windows]).
func serve(arch string, batch, size, warmup, steps int) error {
	s, err := newStepper(arch, batch, size)
	if err != nil {
		return err
	}
	defer s.close()
	for range warmup {
		if err := s.step(); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if err := s.step(); err != nil {
			return err
		}
		ips, cpu, err := s.window(steps)
		if err != nil {
			return err
		}
		fmt.Println(ips, cpu)
	}
	return sc.Err()
}

// sgdMomentum is torch.optim.SGD's step with momentum (no dampening or weight decay):
// mom = μ·mom + g, w -= lr·mom, split across the compute threads (ops.Threads) as torch's
// foreach kernels use their threads, vectorised (AVX-512 where the CPU has it) as torch's
// kernels are. One pass over 25M parameters was a tenth of a resnet50 step at one thread as
// a scalar Go loop.
func sgdMomentum(w, g, mom []float32, lr, mu float32) {
	workers := min(ops.Threads(), max(len(w)>>16, 1))
	var wg sync.WaitGroup
	for k := range workers {
		lo, hi := k*len(w)/workers, (k+1)*len(w)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			simd.SGDMomentum(w[lo:hi], g[lo:hi], mom[lo:hi], lr, mu)
		}()
	}
	wg.Wait()
}

// pick maps xs through f.
func pick[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// childEnv is this process's environment without GOMAXPROCS and the thread counts, which
// each child gets from its row.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOMAXPROCS", "GP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Note [A spare P]
//
// Our kernels are C calls. A goroutine in a C call has left its P (the Go scheduler's right
// to run Go code); when no other P is idle, the runtime's monitor takes that P away after
// 20 µs and hands it to another thread, which finds nothing to do. When the call returns,
// the goroutine must get a P back, often on another thread: a training step makes thousands
// of such calls. With one compute thread and GOMAXPROCS=1, resnet18's step ran 6% slower
// (175-177 against 187 img/s, batch 16 at 64x64, alternated runs on 2 cores) than with
// GOMAXPROCS=2, while using more CPU (0.095-0.097 s a step against 0.090): with a P idle the
// monitor leaves the calling goroutine's P alone. Go's default GOMAXPROCS is the machine's
// cores, and gprun's ranks keep it (they get one compute thread through OMP_NUM_THREADS, as
// torchrun's do), so the rows measure our side that way; the compute threads are the row's
// count, and the CPU seconds per step show what the process used.
