package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// phaseCPU is where a step's time goes in three profiled runs: one plain process alone,
// two plain processes at once (the no-communication ceiling's pair) and DDP at world 2.
// For each run it holds the CPU per step and process by phase and the wall time per step
// (two-process runs: the mean of the two), all in milliseconds. The pair against the lone
// process says why the ceiling is below 1: more CPU for the same work (the two share
// caches and memory bandwidth; ByOp says which ops grow) or time waiting for a core (wall
// minus CPU). DDP against the pair is what DDP adds beyond the ceiling.
type phaseCPU struct {
	Steps    int                `json:"steps"`
	OnePlain map[string]float64 `json:"one_plain"`
	TwoPlain map[string]float64 `json:"two_plain"`
	DDP      map[string]float64 `json:"ddp"`
	// WallMS is the wall time per step of each run: one plain, two plain, DDP.
	WallMS [3]float64 `json:"wall_ms_per_step"`
	// ImgsPerS is the images/s of each run: one plain, two plain, DDP.
	ImgsPerS [3]float64 `json:"imgs_per_s"`
	// ByOp is the forward and backward's CPU per step by op (benchutil.Sample.Op), alone
	// and in the pair.
	ByOp struct {
		OnePlain map[string]float64 `json:"one_plain"`
		TwoPlain map[string]float64 `json:"two_plain"`
	} `json:"fwd_bwd_by_op"`
}

// phaseNames are the phases, in the order of the table.
var phaseNames = []string{"forward and backward", "gradient taps", "all-reduce", "optimizer", "zeroing gradients", "other"}

// phaseOf names the phase a profiled stack belongs to. The communication goroutines' stacks
// hold package comm, DDP's gradient hooks (which hand a ready bucket to them) the gradient
// taps, and the rest of backward and the forward the tape machine.
func phaseOf(s benchutil.Sample) string {
	switch {
	case s.Has("gp/parallel/comm."):
		return "all-reduce"
	case s.Has("gp/optim.") || s.Has("SGDMomentum"):
		return "optimizer"
	case s.Has("ZeroGrad"):
		return "zeroing gradients"
	case s.Has("gradFunc"):
		return "gradient taps"
	case s.Has("gorgonia.(*tapeMachine)"):
		return "forward and backward"
	default:
		return "other"
	}
}

// profiled is what one profiled run gives: CPU per step and process by phase, and of the
// forward and backward by op, in ms; wall ms per step; images/s.
type profiled struct {
	phases, byOp map[string]float64
	wallMS, imgs float64
}

// explainCPU runs one plain process, two plain processes at once and DDP at world 2, each
// once more for steps timed steps with a CPU profile of them, and charges the profiles'
// samples to phases.
func explainCPU(self string, args, env []string, steps int) (*phaseCPU, error) {
	one, err := profilePhases(self, args, env, "plain", 1, steps)
	if err != nil {
		return nil, err
	}
	two, err := profilePhases(self, args, env, "plain", 2, steps)
	if err != nil {
		return nil, err
	}
	ddp, err := profilePhases(self, args, append(slices.Clone(env), "GP_RDZV_SECRET=bench-ddp"), "ddp", 2, steps)
	if err != nil {
		return nil, err
	}
	out := &phaseCPU{Steps: steps, OnePlain: one.phases, TwoPlain: two.phases, DDP: ddp.phases,
		WallMS: [3]float64{one.wallMS, two.wallMS, ddp.wallMS}, ImgsPerS: [3]float64{one.imgs, two.imgs, ddp.imgs}}
	out.ByOp.OnePlain, out.ByOp.TwoPlain = one.byOp, two.byOp
	return out, nil
}

// profilePhases runs n processes of role with a CPU profile of their timed steps
// (GP_BENCH_DDP_PROFILE) and charges the profiles, as the mean over the processes.
func profilePhases(self string, args, env []string, role string, n, steps int) (profiled, error) {
	what := fmt.Sprintf("%d %s, profiled", n, role)
	dir, err := os.MkdirTemp("", "bench-ddp-profile")
	if err != nil {
		return profiled{}, err
	}
	defer os.RemoveAll(dir)
	e := append(slices.Clone(env), "GP_BENCH_DDP_ROLE="+role, "GP_BENCH_DDP_PROFILE="+dir)
	rs, err := launchRanks(n, func(int) []string { return []string{self} }, args, e)
	if err != nil {
		return profiled{}, fmt.Errorf("%s: %w", what, err)
	}
	profs, err := filepath.Glob(filepath.Join(dir, role+"-*.pprof"))
	if err != nil || len(profs) != n {
		return profiled{}, fmt.Errorf("%s: want %d profiles in %s, found %v (%v)", what, n, dir, profs, err)
	}
	out := profiled{phases: map[string]float64{}, byOp: map[string]float64{}, imgs: throughput(rs)}
	per := 1e3 / float64(steps*n) // seconds of all processes → ms per step and process
	for _, pf := range profs {
		samples, err := benchutil.ProfileSamples(self, pf)
		if err != nil {
			return profiled{}, fmt.Errorf("%s: %s: %w", what, filepath.Base(pf), err)
		}
		for _, s := range samples {
			ph := phaseOf(s)
			out.phases[ph] += per * s.Seconds
			if ph == "forward and backward" {
				op := s.Op()
				if strings.HasPrefix(op, "other") {
					op = "other" // the tape machine's own work, whatever its leaf
				}
				out.byOp[op] += per * s.Seconds
			}
		}
	}
	for _, r := range rs {
		out.wallMS += per * r.Seconds
	}
	return out, nil
}

// total is the sum of a run's phases.
func total(phases map[string]float64) float64 {
	var s float64
	for _, v := range phases {
		s += v
	}
	return s
}

// opGrowth lists the ops whose forward and backward CPU per step grew most from the lone
// process to the pair, largest first, at most n, as "op +x.xx".
func (p *phaseCPU) opGrowth(n int) string {
	growth := map[string]float64{}
	for op, v := range p.ByOp.TwoPlain {
		growth[op] += v
	}
	for op, v := range p.ByOp.OnePlain {
		growth[op] -= v
	}
	ops := slices.Sorted(maps.Keys(growth))
	sort.SliceStable(ops, func(i, j int) bool { return growth[ops[i]] > growth[ops[j]] })
	var parts []string
	for _, op := range ops[:min(n, len(ops))] {
		parts = append(parts, fmt.Sprintf("%s %+.2f", op, growth[op]))
	}
	return strings.Join(parts, ", ")
}

// print writes the table: each phase's CPU per step alone, in the pair and in DDP, and what
// DDP adds to the pair; the wall time per step; and where the ceiling's time goes.
func (p *phaseCPU) print() {
	fmt.Printf("\nCPU per step and process by phase, ms (profiles of %d more steps of each; two processes: their mean):\n", p.Steps)
	fmt.Printf("  %-22s %10s %10s %8s %9s\n", "phase", "one plain", "two plain", "DDP", "DDP adds")
	for _, k := range phaseNames {
		o, t, d := p.OnePlain[k], p.TwoPlain[k], p.DDP[k]
		fmt.Printf("  %-22s %10.2f %10.2f %8.2f %+9.2f\n", k, o, t, d, d-t)
	}
	co, ct, cd := total(p.OnePlain), total(p.TwoPlain), total(p.DDP)
	fmt.Printf("  %-22s %10.2f %10.2f %8.2f %+9.2f\n", "CPU", co, ct, cd, cd-ct)
	fmt.Printf("  %-22s %10.2f %10.2f %8.2f %+9.2f\n", "wall", p.WallMS[0], p.WallMS[1], p.WallMS[2], p.WallMS[2]-p.WallMS[1])
	fmt.Printf("  %-22s %10.2f %10.2f %8.2f %+9.2f\n", "wall minus CPU", p.WallMS[0]-co, p.WallMS[1]-ct, p.WallMS[2]-cd, (p.WallMS[2]-cd)-(p.WallMS[1]-ct))
	fmt.Printf("  %-22s %10.1f %10.1f %8.1f\n", "images/s (profiled)", p.ImgsPerS[0], p.ImgsPerS[1], p.ImgsPerS[2])
	fb := p.TwoPlain["forward and backward"] - p.OnePlain["forward and backward"]
	fmt.Printf("The pair's step is %.2f ms longer than the lone process's: %+.2f ms of CPU (forward and backward %+.2f; by op: %s), %+.2f ms of wall time beyond its CPU (waiting for a core).\n",
		p.WallMS[1]-p.WallMS[0], ct-co, fb, p.opGrowth(4), (p.WallMS[1]-ct)-(p.WallMS[0]-co))
}
