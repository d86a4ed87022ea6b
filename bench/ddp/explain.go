package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// phaseCPU is where the CPU time of a step goes, by phase, in a DDP rank and in a plain
// process running beside another (the no-communication ceiling's pair): milliseconds of CPU
// per step and process, each side the mean of its two processes. Their difference is the
// CPU that DDP adds to a step, which on a machine whose cores all run ranks is time lost
// beyond the ceiling.
type phaseCPU struct {
	Steps    int                `json:"steps"`
	DDP      map[string]float64 `json:"ddp"`
	TwoPlain map[string]float64 `json:"two_plain"`
	// ImgsPerS is the images/s of the profiled runs: DDP's and the pair's.
	ImgsPerS [2]float64 `json:"imgs_per_s"`
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

// explainCPU runs DDP at world 2 and two plain processes at once, each once more for steps
// timed steps with a CPU profile of them, and charges the profiles' samples to phases.
func explainCPU(self string, args, env []string, steps int) (*phaseCPU, error) {
	out := &phaseCPU{Steps: steps}
	var err error
	if out.DDP, out.ImgsPerS[0], err = profilePhases(self, args, append(env, "GP_RDZV_SECRET=bench-ddp"), "ddp", steps); err != nil {
		return nil, err
	}
	if out.TwoPlain, out.ImgsPerS[1], err = profilePhases(self, args, env, "plain", steps); err != nil {
		return nil, err
	}
	return out, nil
}

// profilePhases runs two processes of role with a CPU profile of their timed steps
// (GP_BENCH_DDP_PROFILE) and returns the mean CPU per step and process by phase, in ms, and
// the run's images/s.
func profilePhases(self string, args, env []string, role string, steps int) (map[string]float64, float64, error) {
	dir, err := os.MkdirTemp("", "bench-ddp-profile")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	e := append(slices.Clone(env), "GP_BENCH_DDP_ROLE="+role, "GP_BENCH_DDP_PROFILE="+dir)
	rs, err := launchRanks(2, func(int) []string { return []string{self} }, args, e)
	if err != nil {
		return nil, 0, fmt.Errorf("%s, profiled: %w", role, err)
	}
	profs, err := filepath.Glob(filepath.Join(dir, role+"-*.pprof"))
	if err != nil || len(profs) != 2 {
		return nil, 0, fmt.Errorf("%s, profiled: want 2 profiles in %s, found %v (%v)", role, dir, profs, err)
	}
	ms := map[string]float64{}
	for _, pf := range profs {
		samples, err := benchutil.ProfileSamples(self, pf)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", filepath.Base(pf), err)
		}
		for _, s := range samples {
			ms[phaseOf(s)] += 1e3 * s.Seconds / float64(steps*len(profs))
		}
	}
	return ms, throughput(rs), nil
}

// print writes the table: each phase's CPU per step in DDP and beside it in the pair, and
// what DDP adds.
func (p *phaseCPU) print() {
	fmt.Printf("\nCPU per step and process by phase, ms (profiles of %d more steps of each; mean of the two processes):\n", p.Steps)
	fmt.Printf("  %-22s %8s %10s %9s\n", "phase", "DDP", "two plain", "DDP adds")
	var sd, st float64
	for _, k := range phaseNames {
		d, t := p.DDP[k], p.TwoPlain[k]
		sd, st = sd+d, st+t
		fmt.Printf("  %-22s %8.2f %10.2f %+9.2f\n", k, d, t, d-t)
	}
	fmt.Printf("  %-22s %8.2f %10.2f %+9.2f\n", "total", sd, st, sd-st)
	fmt.Printf("  %-22s %8.1f %10.1f\n", "images/s (profiled)", p.ImgsPerS[0], p.ImgsPerS[1])
}
