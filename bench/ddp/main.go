// Command ddp benchmarks DistributedDataParallel: resnet18 at 64x64, batch 16 per rank, one
// thread per rank (OPENBLAS_NUM_THREADS=1, GOMAXPROCS=1, torch.set_num_threads(1)). It
// measures images/s of one plain process (no DDP), of DDP at world 2 as two real processes
// (over shared memory, comm's default when every rank is on this host; the result's
// transport says) and of two plain processes at once (the no-communication ceiling), and the
// same for PyTorch (DDP over gloo, loopback TCP) in the same run, then prints a table and
// writes bench/results/ddp.json. Scaling efficiency is
// the strict definition: thr(world 2) / (2 · thr(one plain process)); DDP's own overhead
// counts against it. The plain process runs before and after DDP in each repetition, and
// its throughput is the mean of the two (this machine's speed drifts within a minute).
// The pair runs once more in lockstep, waiting for each other at a barrier after every
// step: against the free pair, what DDP's synchronization costs; against DDP, what its
// communication costs.
//
// In each repetition, before the pair, probes without the model measure what the machine
// itself leaves each of two processes of one alone's speed: in-cache GEMMs, a scalar chain,
// copies beyond the core's caches (-machine; Note [What the machine lets two processes keep]).
//
// After the repetitions, one plain process, the pair and DDP run once more with CPU profiles
// of their timed steps (-explain-steps), and the table says, phase by phase (forward and
// backward, the gradient taps, the all-reduce, the optimizer, zeroing), how much CPU a step
// takes in each, and its wall time. The pair against the lone process says where the
// ceiling goes (more CPU for the same work, by op, or waiting for a core); DDP against the
// pair is what DDP adds: on a machine whose cores all run ranks, what it loses beyond the
// ceiling.
//
// Every process lowers the Go runtime's monitor thread as the programs a launcher starts as
// ranks do (GP_SYSMON, parallel/sysmon); GP_SYSMON=default measures without it.
//
// "One thread per rank" is GOMAXPROCS=1 by default (-procs): DDP's communication goroutines
// then share the rank's one P with the compute, where gloo has threads of its own; -procs 2
// gives them room, but also lets gorgonia's internal fan-out use both cores in the plain
// process. The per-rank Chrome traces go to the temporary folder, the merged one to -trace.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// result is what one benchmark process reports (one JSON line on stdout).
type result struct {
	Rank     int     `json:"rank"`
	Seconds  float64 `json:"seconds"`
	Imgs     int     `json:"imgs"`
	Buckets  int     `json:"buckets,omitempty"`
	Overlap  float64 `json:"overlap_fraction,omitempty"`
	Backward float64 `json:"backward_s,omitempty"`
	AllRed   float64 `json:"allreduce_s,omitempty"`
	Wait     float64 `json:"wait_s,omitempty"`
	CPU      float64 `json:"cpu_s"` // user+system CPU seconds of the process over the timed steps
	// RunDelay is how long the process's threads were runnable but had no CPU over the timed
	// steps (schedstat), seconds: time lost to the other processes on the machine.
	RunDelay float64 `json:"run_delay_s"`
	// BucketList is the bucket sizes after the rebuild, launch order, e.g. "1.95 MiB, 25.00 MiB, ...".
	BucketList string `json:"bucket_list,omitempty"`
	// Transport is the collectives' transport (comm.TransportOf): "shm" when the ranks share
	// this host, as here by default.
	Transport string `json:"transport,omitempty"`
	// Check is the time of one replica agreement check (hash every parameter and buffer,
	// all-gather the hashes), measured after the timed steps, seconds.
	Check float64 `json:"check_s,omitempty"`
}

type params struct {
	steps, warmup, batch, size int
	bucketMB, lastMB           float64
	trace                      string
	sharedGrads                bool
}

func main() {
	var p params
	flag.IntVar(&p.steps, "steps", 16, "timed training steps per configuration")
	flag.IntVar(&p.warmup, "warmup", 2, "untimed steps before timing (the bucket rebuild happens there)")
	flag.IntVar(&p.batch, "batch", 16, "batch per rank")
	flag.IntVar(&p.size, "size", 64, "image side")
	flag.Float64Var(&p.bucketMB, "bucket-mb", 0, "DDP bucket cap in MiB (0: DDP's default)")
	flag.BoolVar(&p.sharedGrads, "shared-grads", true, "DDP ranks keep their gradients in shared memory (ddp.SharedGradients): all-reduces in place")
	flag.Float64Var(&p.lastMB, "last-bucket-mb", -1, "DDP last bucket size in MiB (-1: DDP's default; 0: PyTorch's layout)")
	reps := flag.Int("reps", 3, "repetitions of the whole measurement; the table shows medians")
	procs := flag.Int("procs", 1, "GOMAXPROCS of each benchmark process")
	explain := flag.Int("explain-steps", 64, "after the repetitions, profile this many steps of one plain process, of two at once and of DDP, and say where the ceiling's and DDP's time goes (0: no profile)")
	machine := flag.Bool("machine", true, "in each repetition, before the pair, measure what the machine leaves each of two processes of one alone's speed, without the model (Note [What the machine lets two processes keep])")
	py := flag.String("python", "/usr/bin/python3", "Python with torch 1.13 and torchvision")
	out := flag.String("out", filepath.Join("bench", "results", "ddp.json"), "JSON results")
	flag.StringVar(&p.trace, "trace", filepath.Join("bench", "results", "ddp_trace.json"), "merged Chrome trace of the DDP run")
	flag.Parse()
	if role := os.Getenv("GP_BENCH_DDP_ROLE"); role != "" {
		var err error
		if role == "probe" {
			err = probeChild()
		} else {
			err = child(role, p)
		}
		if err != nil {
			log.Fatalf("%s: %v", role, err)
		}
		return
	}
	if err := run(p, *procs, *reps, *explain, *machine, *py, *out); err != nil {
		log.Fatal(err)
	}
}

func run(p params, procs, reps, explainSteps int, machine bool, py, out string) error {
	prov := benchutil.Start("ddp", os.Args[1:])
	args := p.childArgs(p.steps, p.trace)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := []string{"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "GOMAXPROCS=" + strconv.Itoa(procs)}
	fmt.Printf("resnet18 %dx%d, batch %d per rank, %d timed steps after %d warm-up, BLAS %s, GOMAXPROCS=%d per process, %d repetitions\n",
		p.size, p.size, p.batch, p.steps, p.warmup, blasimpl.Name(), procs, reps)
	script := filepath.Join("bench", "ddp", "torch_ddp.py")
	targs := []string{"--steps", strconv.Itoa(p.steps), "--warmup", strconv.Itoa(p.warmup), "--batch", strconv.Itoa(p.batch), "--size", strconv.Itoa(p.size)}
	torchNote := ""
	// One repetition measures every configuration once (the plain process twice, before and
	// after DDP), ours and PyTorch's interleaved, so that a disturbance of this shared
	// machine hits one repetition, not one column; the table reports each configuration's
	// median over the repetitions and the median of the per-repetition efficiencies.
	var plains, dists, pairs, locks, tPlains, tDists, tPairs, effs, ceilings, lockCeilings, tEffs, tCeilings, loads []float64
	var machines []machinePair
	var r0 result
	var cpu [3]float64
	for rep := range reps {
		plain, err := launchRanks(1, func(int) []string { return []string{self} }, args, append(env, "GP_BENCH_DDP_ROLE=plain"))
		if err != nil {
			return fmt.Errorf("plain process: %w", err)
		}
		dist, err := launchRanks(2, func(int) []string { return []string{self} }, args, append(env, "GP_BENCH_DDP_ROLE=ddp", "GP_RDZV_SECRET=bench-ddp"))
		if err != nil {
			return fmt.Errorf("DDP world 2: %w", err)
		}
		// The plain process again, after DDP: this machine's speed drifts by tens of percent
		// over a minute, and the mean of the runs before and after DDP cancels a steady drift
		// that one run before it would count as DDP's gain or loss.
		plainAfter, err := launchRanks(1, func(int) []string { return []string{self} }, args, append(env, "GP_BENCH_DDP_ROLE=plain"))
		if err != nil {
			return fmt.Errorf("plain process: %w", err)
		}
		var mp *machinePair
		if machine {
			m, err := measureMachine(self, env)
			if err != nil {
				return err
			}
			machines, mp = append(machines, m), &m
		}
		// Two plain processes at once, without any communication: what two ranks sharing
		// this machine's cores, caches and memory bandwidth can reach at best.
		pair, err := launchRanks(2, func(int) []string { return []string{self} }, args, append(env, "GP_BENCH_DDP_ROLE=plain"))
		if err != nil {
			return fmt.Errorf("two plain processes: %w", err)
		}
		// The pair again, waiting for each other at a barrier after every step: what DDP's
		// synchronization alone costs (a straggler's wait, and both ranks' memory-bound
		// phases falling at the same moments), apart from its communication.
		lockstep, err := launchRanks(2, func(int) []string { return []string{self} }, args, append(env, "GP_BENCH_DDP_ROLE=lockstep", "GP_RDZV_SECRET=bench-ddp"))
		if err != nil {
			return fmt.Errorf("two plain processes in lockstep: %w", err)
		}
		thrPlain, thrDDP, thrPair, thrLock := (throughput(plain)+throughput(plainAfter))/2, throughput(dist), throughput(pair), throughput(lockstep)
		ms := func(s float64) float64 { return s * 1e3 / float64(p.steps) }
		plains, dists, pairs = append(plains, thrPlain), append(dists, thrDDP), append(pairs, thrPair)
		effs, ceilings = append(effs, thrDDP/(2*thrPlain)), append(ceilings, thrPair/(2*thrPlain))
		locks, lockCeilings = append(locks, thrLock), append(lockCeilings, thrLock/(2*thrPlain))
		// The 1-minute load average after the repetition: this machine is shared, and a
		// repetition run beside other work says so here.
		loads = append(loads, benchutil.LoadAvg())
		line := fmt.Sprintf("repetition %d: ours plain %.2f (%.2f before DDP, %.2f after), DDP %.2f img/s, efficiency %.3f (ceiling %.3f, in lockstep %.3f), load %.2f; CPU per step rank 0: DDP %.4f s, two plain %.4f s; run delay per step rank 0/1: plain %.1f ms, DDP %.1f/%.1f ms, two plain %.1f/%.1f ms",
			rep+1, thrPlain, throughput(plain), throughput(plainAfter), thrDDP, effs[rep], ceilings[rep], lockCeilings[rep], loads[rep], dist[0].CPU/float64(p.steps), pair[0].CPU/float64(p.steps),
			ms(plain[0].RunDelay), ms(dist[0].RunDelay), ms(dist[1].RunDelay), ms(pair[0].RunDelay), ms(pair[1].RunDelay))
		if mp != nil {
			line += "; the machine's pair factors: " + mp.String()
		}
		if torchNote == "" {
			tp, err := launchRanks(1, func(int) []string { return []string{py, script, "--mode", "plain"} }, targs, env)
			var td []result
			if err == nil {
				td, err = launchRanks(2, func(int) []string { return []string{py, script, "--mode", "ddp"} }, targs, append(env, "GLOO_SOCKET_IFNAME=lo"))
			}
			var tpAfter, tPair []result
			if err == nil {
				tpAfter, err = launchRanks(1, func(int) []string { return []string{py, script, "--mode", "plain"} }, targs, env)
			}
			if err == nil {
				// PyTorch's own pair: whether its ceiling on this machine is ours.
				tPair, err = launchRanks(2, func(int) []string { return []string{py, script, "--mode", "plain"} }, targs, env)
			}
			if err != nil {
				torchNote = "PyTorch unavailable: " + benchutil.FirstLine(err.Error())
			} else {
				tPlain, tDDP, tTwo := (throughput(tp)+throughput(tpAfter))/2, throughput(td), throughput(tPair)
				tPlains, tDists, tPairs = append(tPlains, tPlain), append(tDists, tDDP), append(tPairs, tTwo)
				tEffs, tCeilings = append(tEffs, tDDP/(2*tPlain)), append(tCeilings, tTwo/(2*tPlain))
				line += fmt.Sprintf("; PyTorch plain %.2f, DDP %.2f img/s, efficiency %.3f (ceiling %.3f)", tPlain, tDDP, tEffs[len(tEffs)-1], tCeilings[len(tCeilings)-1])
			}
		}
		fmt.Println(line)
		if rep == reps/2 || rep == 0 {
			r0 = dist[0]
			for i, rs := range [][]result{plain, dist, pair} {
				cpu[i] = rs[0].CPU / float64(p.steps)
			}
		}
	}
	eff, ceiling := benchutil.Median(effs), benchutil.Median(ceilings)
	var torchEff, torchCeiling any
	if torchNote == "" {
		torchEff, torchCeiling = benchutil.Median(tEffs), benchutil.Median(tCeilings)
	}
	fmt.Println()
	fmt.Printf("%-34s %14s %14s\n", fmt.Sprintf("median of %d repetitions", reps), "ours (Go)", "PyTorch (gloo)")
	fmt.Printf("%-34s %14.2f %14s\n", "1 plain process, images/s", benchutil.Median(plains), num(benchutil.Median(tPlains), torchNote))
	fmt.Printf("%-34s %14.2f %14s\n", "DDP world 2 (2 processes), images/s", benchutil.Median(dists), num(benchutil.Median(tDists), torchNote))
	fmt.Printf("%-34s %14.3f %14s\n", "scaling efficiency thr2/(2·thr1)", eff, numAny(torchEff, torchNote))
	fmt.Printf("%-34s %14.2f %14s\n", "2 plain processes at once, images/s", benchutil.Median(pairs), num(benchutil.Median(tPairs), torchNote))
	fmt.Printf("%-34s %14.3f %14s\n", "  ceiling without communication", ceiling, numAny(torchCeiling, torchNote))
	fmt.Printf("%-34s %14.3f %14s\n", "  in lockstep (a barrier a step)", benchutil.Median(lockCeilings), "")
	ofPair, tOfPair := ratios(effs, ceilings), ratios(tEffs, tCeilings)
	fmt.Printf("%-34s %14.3f %14s\n", "DDP over the pair (1: no loss)", benchutil.Median(ofPair), num(benchutil.Median(tOfPair), torchNote))
	syncCost, commCost := differences(ceilings, lockCeilings), differences(lockCeilings, effs)
	fmt.Printf("lost beyond the ceiling, median of the repetitions: %.3f to synchronization (the pair against it in lockstep), %.3f to communication (lockstep against DDP)\n",
		benchutil.Median(syncCost), benchutil.Median(commCost))
	fmt.Printf("%-34s %14d %14s\n", "buckets (after rebuild)", r0.Buckets, "")
	fmt.Printf("%-34s %14.3f %14s\n", "all-reduce hidden behind backward", r0.Overlap, "")
	fmt.Printf("buckets: %s\n", r0.BucketList)
	fmt.Printf("rank 0 per step (middle repetition): backward %.3f s, all-reduce %.3f s, wait after backward %.3f s\n",
		r0.Backward/float64(p.steps), r0.AllRed/float64(p.steps), r0.Wait/float64(p.steps))
	fmt.Printf("CPU per step (rank 0): plain %.3f s, DDP %.3f s, two plain %.3f s\n", cpu[0], cpu[1], cpu[2])
	stepS := r0.Seconds / float64(p.steps)
	checkShare := r0.Check / (float64(replica.DefaultCheckEvery) * stepS)
	fmt.Printf("replica agreement check: %.2f ms each (%.1f%% of one DDP step), every %d steps: %.3f%% of the step time\n",
		1e3*r0.Check, 100*r0.Check/stepS, replica.DefaultCheckEvery, 100*checkShare)
	if torchNote != "" {
		fmt.Println(torchNote)
	}
	machineFactors := medianFactors(machines)
	if machineFactors != nil {
		fmt.Printf("what the machine leaves each of two processes at once of one alone's speed, median of %d repetitions (no model):\n", len(machines))
		for _, pr := range probes {
			fmt.Printf("  %-24s %.2f  (%s)\n", pr.name, machineFactors[pr.name], pr.exercises)
		}
		fmt.Printf("  %-24s %.2f  (the no-communication ceiling above)\n", "the model", ceiling)
	}
	var phases *phaseCPU
	explainNote := ""
	if explainSteps > 0 {
		// The profiles explain the figures above; without them (no Go toolchain to read
		// them, say) the figures still stand, and the result says why the table is missing.
		if phases, err = explainCPU(self, p.childArgs(explainSteps, ""), env, explainSteps); err != nil {
			explainNote = "no CPU by phase: " + benchutil.FirstLine(err.Error())
			fmt.Println(explainNote)
		} else {
			phases.print()
		}
	}
	res := map[string]any{"efficiency": eff, "torch_efficiency": torchEff, "no_comm_ceiling": ceiling, "imgs_per_s_two_plain": benchutil.Median(pairs), "overlap_fraction": r0.Overlap, "buckets": r0.Buckets,
		"imgs_per_s_plain": benchutil.Median(plains), "imgs_per_s_ddp2": benchutil.Median(dists), "torch_imgs_per_s_plain": benchutil.Median(tPlains), "torch_imgs_per_s_ddp2": benchutil.Median(tDists),
		"torch_imgs_per_s_two_plain": benchutil.Median(tPairs), "torch_no_comm_ceiling": torchCeiling, "torch_ceiling_per_repetition": tCeilings,
		"efficiency_per_repetition": effs, "loadavg_per_repetition": loads, "torch_efficiency_per_repetition": tEffs, "ceiling_per_repetition": ceilings, "lockstep_ceiling": benchutil.Median(lockCeilings), "lockstep_ceiling_per_repetition": lockCeilings,
		"imgs_per_s_lockstep": benchutil.Median(locks), "lost_to_synchronization": benchutil.Median(syncCost), "lost_to_communication": benchutil.Median(commCost), "ddp_over_pair_per_repetition": ofPair, "torch_ddp_over_pair_per_repetition": tOfPair, "repetitions": reps, "bucket_sizes": r0.BucketList, "transport": r0.Transport,
		"check_s": r0.Check, "check_share_of_step_time": checkShare, "check_every": replica.DefaultCheckEvery,
		"cpu_s_per_step_plain": cpu[0], "cpu_s_per_step_ddp": cpu[1], "cpu_s_per_step_two_plain": cpu[2],
		"model": "resnet18", "image": p.size, "batch_per_rank": p.batch, "steps": p.steps, "blas": blasimpl.Name(), "gomaxprocs": procs}
	if torchNote != "" {
		res["torch_note"] = torchNote
	}
	if phases != nil {
		res["cpu_by_phase"] = phases
	}
	if machineFactors != nil {
		res["machine_pair_factor"], res["machine_pair_per_repetition"], res["machine_probes"] = machineFactors, machines, probeInfo()
	}
	if explainNote != "" {
		res["cpu_by_phase_note"] = explainNote
	}
	res["units"] = map[string]string{
		"cpu_by_phase":             "milliseconds per step and process, from CPU-profiled runs of their own (steps timed steps) of one plain process, two plain processes at once and DDP: CPU by phase (one_plain, two_plain, ddp), the forward and backward's CPU by op alone and in the pair (fwd_bwd_by_op), wall time per step (wall_ms_per_step) and images/s (imgs_per_s), each list in the order one plain, two plain, DDP",
		"efficiency":               "fraction: DDP world 2's images/s over twice one plain process's (so are torch_efficiency, no_comm_ceiling, torch_no_comm_ceiling and the per-repetition lists)",
		"overlap_fraction":         "fraction of the all-reduce time hidden behind backward",
		"check_share_of_step_time": "fraction of the step time", "check_every": "steps",
		"lockstep_ceiling":             "fraction: two plain processes that wait for each other at a barrier after every step (DDP's synchronization without its communication), images/s over twice one plain process's (so is lockstep_ceiling_per_repetition; imgs_per_s_lockstep is the pair's images/s)",
		"lost_to_synchronization":      "fraction of twice one plain process's images/s, median over the repetitions: no_comm_ceiling minus lockstep_ceiling (lost_to_communication: lockstep_ceiling minus efficiency); in each repetition the two add up to what DDP loses beyond the ceiling",
		"ddp_over_pair_per_repetition": "fraction: per repetition, DDP's images/s over the pair's (efficiency over ceiling): what DDP keeps of the no-communication ceiling, ours and torch_ddp_over_pair_per_repetition PyTorch's",
		"machine_pair_factor":          "fraction: per probe (machine_probes), the rate per process of two processes at once over one alone's, median over the repetitions",
		"machine_pair_per_repetition":  "per repetition, each probe's rate alone and per process of two at once (in the probe's unit, machine_probes) and the factor between them (fraction)",
		"loadavg_per_repetition":       "one-minute load average after each repetition", "image": "pixels per side", "batch_per_rank": "images",
	}
	prov.End()
	prov.Set(res)
	return prov.Save(os.Stdout, out, res)
}

// childArgs are the flags of a benchmark process timing steps steps, its trace merged into
// trace ("" for none).
func (p params) childArgs(steps int, trace string) []string {
	return []string{"-steps", strconv.Itoa(steps), "-warmup", strconv.Itoa(p.warmup),
		"-batch", strconv.Itoa(p.batch), "-size", strconv.Itoa(p.size), "-trace", trace,
		"-bucket-mb", strconv.FormatFloat(p.bucketMB, 'g', -1, 64), "-last-bucket-mb", strconv.FormatFloat(p.lastMB, 'g', -1, 64),
		"-shared-grads=" + strconv.FormatBool(p.sharedGrads)}
}

// differences is a[i]-b[i] for each i.
func differences(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] - b[i]
	}
	return r
}

// ratios is a[i]/b[i] for each i.
func ratios(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] / b[i]
	}
	return r
}

func throughput(rs []result) float64 {
	imgs, secs := 0, 0.0
	for _, r := range rs {
		imgs += r.Imgs
		secs = max(secs, r.Seconds)
	}
	return float64(imgs) / secs
}

func num(v float64, note string) string {
	if note != "" {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func numAny(v any, note string) string {
	if f, ok := v.(float64); ok && note == "" {
		return fmt.Sprintf("%.3f", f)
	}
	return "n/a"
}

// child is one benchmark process: "plain" (no DDP) or "ddp" (a rank of the torchrun env).
func child(role string, p params) error {
	ctx := context.Background()
	// Every role, plain ones too, gets what a launched rank's main does: the runtime's
	// monitor thread lowered (GP_SYSMON; Note [The monitor thread and cgo]).
	if _, err := sysmon.Lower(); err != nil {
		return err
	}
	arch, err := resnet.ResNet18(1000)
	if err != nil {
		return err
	}
	mopts := []nn.ModelOption{nn.WithSeed(0)}
	var g comm.Group
	if role == "ddp" || role == "lockstep" {
		if g, err = comm.InitFromEnv(ctx); err != nil {
			return err
		}
		defer g.Close(ctx)
		if role == "ddp" && p.sharedGrads {
			mopts = append(mopts, ddp.SharedGradients(ctx, g))
		}
	}
	m, err := nn.NewModel(arch, mopts...)
	if err != nil {
		return err
	}
	build := nn.Classify(p.batch, []int{3, p.size, p.size}, 0)
	segs, err := optim.Segments(m.Params, 0, optim.Merged())
	if err != nil {
		return err
	}
	opt, err := optim.NewSGD(segs, 0.01, optim.WithMomentum(0.9))
	if err != nil {
		return err
	}
	var step func() error
	var d *ddp.DDP
	var prog interface {
		SetInput(string, []float32) error
	}
	rank := 0
	switch role {
	case "plain", "lockstep":
		// A lockstep process is a plain one that waits for its peer at a barrier after
		// every step: DDP's synchronization without its communication.
		np, err := nn.Compile(m, build)
		if err != nil {
			return err
		}
		prog = np
		step = func() error {
			m.Params.ZeroGrad()
			if err := np.Run(ctx); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if g != nil {
				return g.Barrier().Wait(ctx)
			}
			return nil
		}
		if g != nil {
			rank = g.Rank()
		}
	case "ddp":
		rank = g.Rank()
		var opts []ddp.Option
		if p.bucketMB > 0 {
			opts = append(opts, ddp.BucketCapBytes(int(p.bucketMB*(1<<20))))
		}
		if p.lastMB >= 0 {
			opts = append(opts, ddp.LastBucketBytes(int(p.lastMB*(1<<20))))
		}
		hopts, err := hookOptions()
		if err != nil {
			return err
		}
		if d, err = ddp.New(ctx, m, g, append(opts, hopts...)...); err != nil {
			return err
		}
		dp, err := d.Compile(build, nn.WithOptimizer(opt))
		if err != nil {
			return err
		}
		prog = dp
		step = func() error { return dp.RunStep(ctx) }
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	rng := rand.New(rand.NewSource(int64(rank)))
	x := make([]float32, p.batch*3*p.size*p.size)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]float32, p.batch)
	for i := range y {
		y[i] = float32(rng.Intn(1000))
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
	if g != nil {
		if err := g.Barrier().Wait(ctx); err != nil {
			return err
		}
	}
	if d != nil {
		d.Timeline().Reset()
	}
	// GP_BENCH_DDP_PROFILE=DIR writes a CPU profile of each process's timed steps to
	// DIR/<role>-<rank>-<pid>.pprof (to see where DDP's time goes next to a plain process).
	if dir := os.Getenv("GP_BENCH_DDP_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d-%d.pprof", role, rank, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// GP_BENCH_DDP_GOTRACE=DIR writes a Go execution trace of each process's timed steps to
	// DIR/<role>-<rank>-<pid>.trace (go tool trace -pprof=sched: how long the compute
	// goroutine waited for the rank's one P while communication goroutines held it).
	if dir := os.Getenv("GP_BENCH_DDP_GOTRACE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d-%d.trace", role, rank, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	cpu0, delay0 := benchutil.CPUSeconds(), benchutil.RunDelaySeconds()
	start := time.Now()
	for range p.steps {
		if err := step(); err != nil {
			return err
		}
	}
	pprof.StopCPUProfile() // the profile holds the timed steps only
	res := result{Rank: rank, Seconds: time.Since(start).Seconds(), Imgs: p.batch * p.steps, CPU: benchutil.CPUSeconds() - cpu0,
		RunDelay: benchutil.RunDelaySeconds() - delay0}
	if d != nil {
		s := d.Timeline().Summary()
		res.Buckets, res.Overlap = len(d.Buckets()), s.OverlapFraction
		var sizes []string
		for _, b := range d.Buckets() {
			sizes = append(sizes, fmt.Sprintf("%.2f MiB", float64(b.Bytes())/(1<<20)))
		}
		res.BucketList = strings.Join(sizes, ", ")
		res.Transport = comm.TransportOf(g)
		res.Backward, res.AllRed, res.Wait = s.Backward.Seconds(), s.AllReduce.Seconds(), s.Wait.Seconds()
		if err := writeTrace(ctx, d, p.trace); err != nil {
			return err
		}
		// The agreement check runs every replica.DefaultCheckEvery steps, so the timed steps
		// above hold none: time it alone, as DDP runs it.
		var c replica.Checker
		ts := replica.Replicated(m.Params, true, true)
		// As in DDP, the buffers are compared after rank 0's are broadcast (each rank's
		// running statistics are those of its own last forward until then).
		var bc replica.Broadcaster
		if err := bc.Buffers(ctx, d.Group(), m.Params.Buffers, 0, "bench"); err != nil {
			return err
		}
		const checks = 5
		t0 := time.Now()
		for range checks {
			if err := c.Check(ctx, d.Group(), ts, 0, "bench"); err != nil {
				return err
			}
		}
		res.Check = time.Since(t0).Seconds() / checks
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// writeTrace writes this rank's Chrome trace; rank 0 waits for the others (a barrier) and
// merges them into merged.
func writeTrace(ctx context.Context, d *ddp.DDP, merged string) error {
	if merged == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(merged), 0o755); err != nil {
		return err
	}
	// Per-rank traces go to the temporary folder (shared by the ranks of one machine).
	port := os.Getenv("MASTER_PORT")
	name := func(r int) string {
		return filepath.Join(os.TempDir(), fmt.Sprintf("gp_ddp_trace_%s_rank%d.json", port, r))
	}
	var buf bytes.Buffer
	if err := d.Timeline().WriteChromeTrace(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(name(d.Rank()), buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := d.Group().Barrier().Wait(ctx); err != nil {
		return err
	}
	if d.Rank() != 0 {
		return nil
	}
	var readers []io.Reader
	for r := range d.Size() {
		f, err := os.Open(name(r))
		if err != nil {
			return err
		}
		defer f.Close()
		readers = append(readers, f)
	}
	out, err := os.Create(merged)
	if err != nil {
		return err
	}
	if err := timeline.MergeChromeTraces(out, readers...); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// launchRanks runs n benchmark processes as one job (benchutil.Launch, 10 minutes at most).
func launchRanks(n int, cmdline func(rank int) []string, args, env []string) ([]result, error) {
	return benchutil.Launch[result](n, cmdline, args, env, 10*time.Minute)
}
