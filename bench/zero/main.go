// Command zero (make bench-zero) measures step time and per-rank memory of DDP, ZeRO-3,
// ZeRO-3 with cpu offload and ZeRO-3 with disk offload, each at world 2 (two processes over
// loopback TCP, rendezvous as torchrun), training resnet50 on 64x64 images with AdamW,
// and holds the model-state bytes against the ZeRO paper's formula (16·Ψ for DDP's
// replicas, 16·Ψ/N for ZeRO-3). It prints a table and writes bench/results/zero.json.
//
// model_state_bytes_per_rank is counted from the buffers (DDP: parameters, gradients and
// AdamW state; ZeRO-3: zero.Memory.InMemoryBytes between steps, so disk-offloaded state
// that is not paged in is not counted; in_files_bytes says how much lives in files).
// peak_rss_bytes is the process's VmHWM, which includes the model as built before sharding
// and the tape's activations and weight-gradient registers.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/internal/procstatus"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	"github.com/gorgonia-parallel/gp/parallel/zero"
	"github.com/gorgonia-parallel/gp/train"
)

// row is one row of bench/results/zero.json (under "rows").
type row struct {
	Strategy        string  `json:"strategy"`
	World           int     `json:"world"`
	Psi             int     `json:"psi"`
	ModelStateBytes int64   `json:"model_state_bytes_per_rank"`
	FormulaBytes    float64 `json:"formula_bytes"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	StepS           float64 `json:"step_s"`
	InFilesBytes    int64   `json:"in_files_bytes"`
	RSSBytes        int64   `json:"rss_between_steps_bytes"`
	StepPeakBytes   int64   `json:"step_peak_model_state_bytes,omitempty"`
	GatherWaitS     float64 `json:"gather_wait_s,omitempty"`
	RegatherWaitS   float64 `json:"regather_wait_s,omitempty"`
	ReduceWaitS     float64 `json:"reduce_wait_s,omitempty"`
	MinFltPerStep   float64 `json:"minor_faults_per_step"`
	MajFltPerStep   float64 `json:"major_faults_per_step"`
	Rank            int     `json:"-"`
}

type params struct {
	arch                       string
	steps, warmup, batch, size int
	procs, unitDepth           int
	profile                    string
}

var strategies = []string{"ddp", "zero3", "zero3+cpu", "zero3+disk"}

func main() {
	var p params
	flag.StringVar(&p.arch, "arch", "resnet50", "model (models.New), 10 classes")
	flag.IntVar(&p.steps, "steps", 3, "timed steps")
	flag.IntVar(&p.warmup, "warmup", 1, "untimed steps first")
	flag.IntVar(&p.batch, "batch", 4, "batch per rank")
	flag.IntVar(&p.size, "size", 64, "image side")
	flag.IntVar(&p.procs, "procs", 1, "GOMAXPROCS (and AdamW workers) of each process")
	flag.IntVar(&p.unitDepth, "unit-depth", 2, "ZeRO gather units: name components (2: resnet blocks such as layer1.0)")
	only := flag.String("strategies", strings.Join(strategies, ","), "comma-separated strategies to run")
	flag.StringVar(&p.profile, "cpuprofile", "", "directory for each rank's CPU profile of the timed steps (cpu-<strategy>-<rank>.pprof)")
	out := flag.String("out", filepath.Join("bench", "results", "zero.json"), "JSON results")
	flag.Parse()
	strategies = strings.Split(*only, ",")
	if s := os.Getenv("GP_BENCH_ZERO_ROLE"); s != "" {
		if err := child(s, p); err != nil {
			log.Fatalf("%s rank %s: %v", s, os.Getenv("RANK"), err)
		}
		return
	}
	if err := run(p, *out); err != nil {
		log.Fatal(err)
	}
}

func run(p params, out string) error {
	prov := benchutil.Start("zero", os.Args[1:])
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("%s %dx%d, batch %d per rank, world 2 (processes), AdamW, %d timed steps after %d warm-up, BLAS %s, GOMAXPROCS=%d\n",
		p.arch, p.size, p.size, p.batch, p.steps, p.warmup, blasimpl.Name(), p.procs)
	args := []string{"-arch", p.arch, "-steps", strconv.Itoa(p.steps), "-warmup", strconv.Itoa(p.warmup),
		"-batch", strconv.Itoa(p.batch), "-size", strconv.Itoa(p.size), "-procs", strconv.Itoa(p.procs), "-unit-depth", strconv.Itoa(p.unitDepth), "-cpuprofile", p.profile}
	var rows []row
	for _, s := range strategies {
		res, err := launch(self, 2, args, []string{"GP_BENCH_ZERO_ROLE=" + s, "GP_RDZV_SECRET=bench-zero",
			"OPENBLAS_NUM_THREADS=1", "GOMAXPROCS=" + strconv.Itoa(p.procs)})
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		r := res[0]
		for _, o := range res[1:] { // the worst rank
			r.ModelStateBytes = max(r.ModelStateBytes, o.ModelStateBytes)
			r.PeakRSSBytes = max(r.PeakRSSBytes, o.PeakRSSBytes)
			r.RSSBytes = max(r.RSSBytes, o.RSSBytes)
			r.StepS = max(r.StepS, o.StepS)
			r.StepPeakBytes = max(r.StepPeakBytes, o.StepPeakBytes)
			r.MinFltPerStep = max(r.MinFltPerStep, o.MinFltPerStep)
			r.MajFltPerStep = max(r.MajFltPerStep, o.MajFltPerStep)
		}
		rows = append(rows, r)
	}
	fmt.Println()
	fmt.Printf("%-11s %5s %10s %14s %14s %7s %12s %12s %12s %14s %8s %12s\n", "strategy", "world", "Ψ", "state MiB/rank", "formula MiB", "ratio", "in files MiB", "RSS MiB", "peak RSS MiB", "step peak MiB", "step s", "faults/step")
	mib := func(b float64) float64 { return b / (1 << 20) }
	for _, r := range rows {
		fmt.Printf("%-11s %5d %10d %14.1f %14.1f %7.3f %12.1f %12.1f %12.1f %14.1f %8.3f %12.0f\n", r.Strategy, r.World, r.Psi,
			mib(float64(r.ModelStateBytes)), mib(r.FormulaBytes), float64(r.ModelStateBytes)/r.FormulaBytes,
			mib(float64(r.InFilesBytes)), mib(float64(r.RSSBytes)), mib(float64(r.PeakRSSBytes)), mib(float64(r.StepPeakBytes)), r.StepS,
			r.MinFltPerStep+r.MajFltPerStep)
	}
	fmt.Println("state: model state in memory between steps (counted buffers; disk offload's files excluded), formula: 16Ψ (DDP) or 16Ψ/N (ZeRO-3),")
	fmt.Println("RSS: VmRSS between steps after a GC, peak RSS: VmHWM over the process's life, step peak: ZeRO's sampled model-state peak")
	fmt.Println("during a step (persistent state + gathered parameters + reduce-scatter buffers), step s: mean over timed steps, slowest rank,")
	fmt.Println("faults/step: page faults (minor+major, /proc/self/stat) per timed step, worst rank.")
	for _, r := range rows {
		if r.Strategy != "ddp" {
			fmt.Printf("%s: waits per step (rank 0) all-gather %.3f s, re-gather %.3f s, reduce-scatter after the tape %.3f s\n", r.Strategy, r.GatherWaitS, r.RegatherWaitS, r.ReduceWaitS)
		}
	}
	prov.End()
	return prov.Save(os.Stdout, out, benchutil.Rows[row]{Provenance: prov, Units: map[string]string{
		"psi":                   "parameters of the model (Ψ)",
		"formula_bytes":         "bytes: 16Ψ (DDP) or 16Ψ/N (ZeRO-3) of model state per rank",
		"step_s":                "seconds per timed step, the mean over the steps, slowest rank",
		"minor_faults_per_step": "page faults per timed step, worst rank (so is major_faults_per_step)",
	}, Rows: rows})
}

func build(batch, size int) nn.BuildFunc {
	return nn.Classify(batch, []int{3, size, size}, 0)
}

// child is one rank of one strategy.
func child(strategy string, p params) error {
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	// One rank of several on this host: the runtime's monitor thread yields the cores to the
	// compute (parallel/sysmon), as in every program the launcher starts.
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	g, err := comm.InitFromEnv(ctx, comm.WithTimeout(5*time.Minute))
	if err != nil {
		return err
	}
	defer g.Close(ctx)
	arch, err := models.New(p.arch, 10)
	if err != nil {
		return err
	}
	m, err := nn.NewModel(arch, nn.WithSeed(1))
	if err != nil {
		return err
	}
	psi := m.Params.NumParams()
	r := row{Strategy: strategy, World: g.Size(), Psi: psi, Rank: g.Rank()}
	var prog interface{ SetInput(string, []float32) error }
	var step func() error
	var account func()
	switch strategy {
	case "ddp":
		d, err := ddp.New(ctx, m, g)
		if err != nil {
			return err
		}
		segs, err := optim.Segments(m.Params, 1e-2)
		if err != nil {
			return err
		}
		opt, err := optim.NewAdamW(segs, 1e-3, optim.WithWorkers(p.procs, 1<<15))
		if err != nil {
			return err
		}
		dp, err := d.Compile(build(p.batch, p.size), nn.WithOptimizer(opt))
		if err != nil {
			return err
		}
		prog = dp
		step = func() error { return dp.RunStep(ctx) }
		account = func() {
			if dir := os.Getenv("GP_BENCH_ZERO_DEBUG"); dir != "" {
				debugMemory(dir, strategy, g.Rank())
			}
			r.ModelStateBytes = 4*int64(len(m.Params.Data)+len(m.Params.Grad)) + optim.StateBytes(opt)
			r.FormulaBytes = 16 * float64(psi)
		}
	default:
		opts := []zero.Option{zero.WithUnitDepth(p.unitDepth), zero.WithWeightDecay(1e-2), zero.WithOptimizer(zero.AdamW(1e-3, optim.WithWorkers(p.procs, 1<<15)))}
		switch strategy {
		case "zero3+cpu":
			opts = append(opts, zero.WithOffload(zero.OffloadCPU, p.procs))
		case "zero3+disk":
			dir, err := os.MkdirTemp("", "gp-zero-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			opts = append(opts, zero.WithOffload(zero.OffloadDisk, p.procs), zero.WithOffloadDir(dir))
		}
		e, err := zero.New(ctx, m, g, opts...)
		if err != nil {
			return err
		}
		defer e.Close()
		zp, err := e.Compile(build(p.batch, p.size))
		if err != nil {
			return err
		}
		prog = zp
		step = func() error { e.ZeroGrad(); return train.RunStep(ctx, zp) }
		account = func() {
			mem := e.Memory()
			r.ModelStateBytes, r.InFilesBytes = mem.InMemoryBytes(), mem.FileBytes
			r.FormulaBytes = mem.FormulaBytes()
			r.StepPeakBytes = mem.PeakStepBytes
			st := zp.Stats()
			r.GatherWaitS, r.RegatherWaitS, r.ReduceWaitS = st.GatherWait.Seconds(), st.RegatherWait.Seconds(), st.ReduceWait.Seconds()
			if dir := os.Getenv("GP_BENCH_ZERO_DEBUG"); dir != "" {
				fmt.Fprintf(os.Stderr, "%s rank %d: %v\n", strategy, g.Rank(), mem)
				debugMemory(dir, strategy, g.Rank())
			}
		}
	}
	rng := rand.New(rand.NewSource(int64(g.Rank())))
	x := make([]float32, p.batch*3*p.size*p.size)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, p.batch)
	for i := range y {
		y[i] = float32(rng.Intn(10))
	}
	if err := prog.SetInput("images", x); err != nil {
		return err
	}
	if err := prog.SetInput("labels", y); err != nil {
		return err
	}
	for range p.warmup {
		if err := step(); err != nil {
			return err
		}
	}
	if p.profile != "" {
		f, err := os.Create(filepath.Join(p.profile, fmt.Sprintf("cpu-%s-%d.pprof", strategy, g.Rank())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	min0, maj0 := faults()
	start := time.Now()
	for range p.steps {
		if err := step(); err != nil {
			return err
		}
	}
	r.StepS = time.Since(start).Seconds() / float64(max(p.steps, 1))
	min1, maj1 := faults()
	pprof.StopCPUProfile()
	r.MinFltPerStep = float64(min1-min0) / float64(max(p.steps, 1))
	r.MajFltPerStep = float64(maj1-maj0) / float64(max(p.steps, 1))
	runtime.GC()
	debug.FreeOSMemory()
	account()
	if r.RSSBytes, err = procstatus.Bytes("VmRSS"); err != nil {
		return err
	}
	if r.PeakRSSBytes, err = procstatus.Bytes("VmHWM"); err != nil {
		return err
	}
	// The program (its graph and the ops' buffers) is alive between steps of a training
	// loop: keep it alive through the measurement, or the GC frees it and RSS flatters.
	runtime.KeepAlive(step)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return g.Barrier().Wait(ctx)
}

// debugMemory (GP_BENCH_ZERO_DEBUG=dir) prints the Go runtime's view of memory and the
// process's smaps_rollup, and writes a heap profile to dir/heap-<strategy>-<rank>.pprof
// (go tool pprof -sample_index=inuse_space).
func debugMemory(dir, strategy string, rank int) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rollup, _ := os.ReadFile("/proc/self/smaps_rollup")
	fmt.Fprintf(os.Stderr, "%s rank %d: Go heap in use %d B, heap sys %d B, heap released %d B, stacks %d B, other sys %d B, total sys %d B\n%s\n",
		strategy, rank, ms.HeapInuse, ms.HeapSys, ms.HeapReleased, ms.StackSys, ms.OtherSys+ms.GCSys+ms.MSpanSys+ms.MCacheSys+ms.BuckHashSys, ms.Sys, rollup)
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pprof", strategy, rank)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// faults reads this process's minor and major page-fault counts (fields 10 and 12 of
// /proc/self/stat); zeros when it cannot.
func faults() (minflt, majflt int64) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0
	}
	// The command name (field 2) may hold spaces: count fields after its closing ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 10 {
		return 0, 0
	}
	minflt, _ = strconv.ParseInt(f[7], 10, 64)
	majflt, _ = strconv.ParseInt(f[9], 10, 64)
	return minflt, majflt
}

// launch runs n ranks of this program with args (benchutil.Launch, 15 minutes at most).
func launch(self string, n int, args, env []string) ([]row, error) {
	return benchutil.Launch[row](n, func(int) []string { return []string{self} }, args, env, 15*time.Minute)
}
