// Command dp reproduces the DataParallel-versus-DDP comparison on this CPU: resnet18 at
// 64x64, global batch 32, SGD with momentum; time per training step (zero grad, forward,
// backward, gradient reduction, optimizer step) with one replica, with DataParallel over 2
// replicas in one process, and with DDP over 2 processes; speedups over one replica, memory
// per replica or rank and its imbalance (largest over smallest).
//
// Usage: go run ./bench/dp [-steps 5] [-warmup 2] [-out bench/results/dp.json]
//
// Every configuration runs in fresh processes (this command re-executes itself), because
// OpenBLAS reads its thread count when the process starts:
//
//   - 1 replica, 1 core: GOMAXPROCS=1, OPENBLAS_NUM_THREADS=1. One replica on one device, the
//     baseline of the DataParallel literature (one GPU); the speedups are against it.
//   - 1 replica, 2 cores: GOMAXPROCS=2, OPENBLAS_NUM_THREADS=2. What one process gets from the
//     whole machine without any data parallelism; printed as a second baseline.
//   - DataParallel, 2 replicas: one process, GOMAXPROCS=2, OPENBLAS_NUM_THREADS=1. Each
//     replica's goroutine calls the BLAS on its own thread, so 2 replicas x 1 BLAS thread
//     fill the 2 cores without oversubscription; more BLAS threads would make each replica's
//     GEMMs fight the other replica for the same cores.
//   - DDP, world 2: two processes started by parallel/launch, each GOMAXPROCS=1,
//     OPENBLAS_NUM_THREADS=1 (a rank per core, like a rank per GPU), batch 16 each, TCP
//     process group on loopback.
//
// It prints a table and one JSON line, also written to -out with the keys dp_speedup,
// ddp_speedup, dp_memory_imbalance and ddp_memory_imbalance, plus the raw numbers.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/parallel/launch"
)

const marker = "DPBENCH "

// measurement is what one process reports (a worker prints it after marker).
type measurement struct {
	Role      string  `json:"role"`
	Rank      int     `json:"rank"`
	StepS     float64 `json:"step_s"`      // median seconds per step
	MeanStepS float64 `json:"mean_step_s"` // mean seconds per step
	CPUS      float64 `json:"cpu_s"`       // CPU seconds (user+system) per step
	Loss      float64 `json:"loss"`        // loss of the last step
	Memory    []int64 `json:"memory"`      // bytes per replica (DP) or for this rank
	HeapMiB   float64 `json:"heap_mib"`    // Go heap in use after the run
	Threads   int     `json:"blas_threads"`
	RunS      float64 `json:"run_s,omitempty"`    // DataParallel: mean seconds of the replicas' concurrent part
	MasterS   float64 `json:"master_s,omitempty"` // DataParallel: mean seconds of gather + gradient reduction
}

type row struct {
	Name    string
	StepS   float64
	MeanS   float64
	CPUS    float64
	Memory  []int64
	HeapMiB []float64
	Loss    float64
	RunS    float64
	MasterS float64
}

func main() {
	role := flag.String("role", "", "internal: run one configuration (single, dp, ddp)")
	replicas := flag.Int("replicas", 2, "DataParallel replicas / DDP world size")
	batch := flag.Int("batch", 32, "global batch size")
	size := flag.Int("size", 64, "image side")
	steps := flag.Int("steps", 5, "measured steps")
	warmup := flag.Int("warmup", 2, "unmeasured steps first (compilation, buffer warm-up)")
	out := flag.String("out", "bench/results/dp.json", "JSON result file")
	flag.Parse()
	w := workload{replicas: *replicas, batch: *batch, size: *size, steps: *steps, warmup: *warmup}
	var err error
	if *role != "" {
		err = runWorker(context.Background(), *role, w)
	} else {
		err = drive(context.Background(), w, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dp:", err)
		os.Exit(1)
	}
}

func drive(ctx context.Context, w workload, out string) error {
	prov := benchutil.Start("dp", os.Args[1:])
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"-replicas", fmt.Sprint(w.replicas), "-batch", fmt.Sprint(w.batch), "-size", fmt.Sprint(w.size),
		"-steps", fmt.Sprint(w.steps), "-warmup", fmt.Sprint(w.warmup)}
	fmt.Printf("bench/dp: resnet18 %dx%d, global batch %d, %d measured steps after %d warm-up; load average %.2f\n",
		w.size, w.size, w.batch, w.steps, w.warmup, prov.Machine.Load)
	child := func(name, role string, procs, threads int) (row, error) {
		fmt.Printf("  running %s ...\n", name)
		cmd := exec.CommandContext(ctx, self, append([]string{"-role", role}, args...)...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs), fmt.Sprintf("OPENBLAS_NUM_THREADS=%d", threads))
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, os.Stderr
		if err := cmd.Run(); err != nil {
			return row{}, fmt.Errorf("%s: %w", name, err)
		}
		return collect(name, buf.Bytes(), 1)
	}
	single1, err := child("1 replica, 1 core", "single", 1, 1)
	if err != nil {
		return err
	}
	single2, err := child("1 replica, 2 cores", "single", 2, 2)
	if err != nil {
		return err
	}
	dpRow, err := child(fmt.Sprintf("DataParallel, %d replicas", w.replicas), "dp", w.replicas, 1)
	if err != nil {
		return err
	}
	ddpName := fmt.Sprintf("DDP, world %d", w.replicas)
	fmt.Printf("  running %s ...\n", ddpName)
	var buf bytes.Buffer
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: w.replicas, Program: self, Args: append([]string{"-role", "ddp"}, args...),
		Env:    []string{"GOMAXPROCS=1", "OPENBLAS_NUM_THREADS=1"},
		Stdout: &buf, Stderr: os.Stderr,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", ddpName, err)
	}
	ddpRow, err := collect(ddpName, buf.Bytes(), w.replicas)
	if err != nil {
		return err
	}
	rows := []row{single1, single2, dpRow, ddpRow}
	return report(rows, w, out, prov)
}

// collect parses the measurements of n processes of one configuration. For several ranks
// the step time is the slowest rank's and memory lists every rank's.
func collect(name string, out []byte, n int) (row, error) {
	r := row{Name: name}
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, marker)
		if i < 0 {
			fmt.Println("    " + line)
			continue
		}
		var m measurement
		if err := json.Unmarshal([]byte(line[i+len(marker):]), &m); err != nil {
			return r, fmt.Errorf("%s: bad measurement %q: %w", name, line, err)
		}
		found++
		r.StepS = max(r.StepS, m.StepS)
		r.MeanS = max(r.MeanS, m.MeanStepS)
		r.CPUS += m.CPUS
		r.Memory = append(r.Memory, m.Memory...)
		r.HeapMiB = append(r.HeapMiB, m.HeapMiB)
		if m.Rank == 0 {
			r.Loss, r.RunS, r.MasterS = m.Loss, m.RunS, m.MasterS
		}
	}
	if found != n {
		return r, fmt.Errorf("%s: %d measurements, want %d", name, found, n)
	}
	return r, nil
}

func imbalance(mem []int64) float64 {
	lo, hi := mem[0], mem[0]
	for _, m := range mem {
		lo, hi = min(lo, m), max(hi, m)
	}
	return float64(hi) / float64(lo)
}

// report prints the table and writes out; prov is the run's, its end load read here.
func report(rows []row, w workload, out string, prov benchutil.Provenance) error {
	base := rows[0].StepS
	mib := func(v int64) string { return fmt.Sprintf("%.0f", float64(v)/(1<<20)) }
	fmt.Printf("\n%-26s %9s %9s %9s %8s %9s %-24s %10s %s\n", "configuration", "s/step", "img/s", "speedup", "vs 2core", "CPU s/step", "memory MiB per replica", "imbalance", "Go heap MiB per process")
	for _, r := range rows {
		mems := make([]string, len(r.Memory))
		for i, m := range r.Memory {
			mems[i] = mib(m)
		}
		heaps := make([]string, len(r.HeapMiB))
		for i, h := range r.HeapMiB {
			heaps[i] = fmt.Sprintf("%.0f", h)
		}
		fmt.Printf("%-26s %9.3f %9.1f %8.2fx %7.2fx %9.2f  %-24s %10.2f %s\n", r.Name, r.StepS, float64(w.batch)/r.StepS,
			base/r.StepS, rows[1].StepS/r.StepS, r.CPUS, strings.Join(mems, " / "), imbalance(r.Memory), strings.Join(heaps, " / "))
	}
	dpr := rows[2]
	fmt.Printf("DataParallel step (mean %.3f s): replicas run %.3f s, master gather+reduce %.3f s, rest (bind, optimizer step, zero grad) %.3f s\n",
		dpr.MeanS, dpr.RunS, dpr.MasterS, dpr.MeanS-dpr.RunS-dpr.MasterS)
	fmt.Println("s/step: median wall time (slowest rank); CPU s/step: all threads of all processes of the configuration.")
	fmt.Println("speedup: over 1 replica on 1 core (one device); vs 2core: over 1 replica with 2 BLAS threads.")
	fmt.Println("memory: graph values + gradient buffers; DataParallel's replica 0 and every DDP rank also hold")
	fmt.Println("parameters, running stats, the gradient buffer of the model and the optimizer state.")
	res := map[string]any{
		"bench": "dp", "model": "resnet18", "image": w.size, "global_batch": w.batch, "replicas": w.replicas,
		"dp_speedup":                  base / rows[2].StepS,
		"ddp_speedup":                 base / rows[3].StepS,
		"dp_memory_imbalance":         imbalance(rows[2].Memory),
		"ddp_memory_imbalance":        imbalance(rows[3].Memory),
		"dp_speedup_vs_2thread":       rows[1].StepS / rows[2].StepS,
		"ddp_speedup_vs_2thread":      rows[1].StepS / rows[3].StepS,
		"single_1core_step_s":         rows[0].StepS,
		"single_2core_step_s":         rows[1].StepS,
		"dp_step_s":                   rows[2].StepS,
		"ddp_step_s":                  rows[3].StepS,
		"dp_memory_bytes_per_replica": rows[2].Memory,
		"ddp_memory_bytes_per_rank":   rows[3].Memory,
		"cpu_s_per_step":              []float64{rows[0].CPUS, rows[1].CPUS, rows[2].CPUS, rows[3].CPUS},
		"dp_run_s":                    rows[2].RunS,
		"dp_master_reduce_s":          rows[2].MasterS,
		"units": map[string]string{
			"image": "pixels per side", "global_batch": "images per step",
			"dp_speedup":          "ratio: 1 replica on 1 core's step time over this one's (so are ddp_speedup and the _vs_2thread ones, over 1 replica with 2 BLAS threads)",
			"dp_memory_imbalance": "ratio: the largest replica's memory over the smallest's (so is ddp_memory_imbalance)",
			"cpu_s_per_step":      "CPU seconds per step of all threads of all processes: 1 replica on 1 core, on 2 cores, DataParallel, DDP",
		},
	}
	prov.End()
	prov.Set(res)
	return prov.Save(os.Stdout, out, res)
}

// since is a helper for workers: seconds since t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
