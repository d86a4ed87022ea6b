package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
)

// Profile is where one architecture's training step spends its CPU time at one thread, from
// a CPU profile of the timed steps (warm-up and model building excluded): the share of the
// samples by op (the outermost op's Do method on the stack, the optimizer, the garbage
// collector) and by kernel (the innermost recognised work: GEMM, im2col, a SIMD kernel,
// memory copies and clears, allocation).
type Profile struct {
	Arch     string             `json:"arch"`
	Batch    int                `json:"batch"`
	Size     int                `json:"size"`
	Seconds  float64            `json:"profiled_cpu_s"` // CPU time the samples cover
	ByOp     map[string]float64 `json:"share_by_op"`
	ByKernel map[string]float64 `json:"share_by_kernel"`
}

// profileAll profiles each workload (of archs, all when empty) in a -child at one thread and
// writes the profiles to out. An entry of archs may also name a workload of its own as
// arch:batch:size (e.g. resnet8_s2:64:28, the demo's model at its batch per rank).
func profileAll(archs, out string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-models-profile")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	prov := benchutil.Start("models", os.Args[1:])
	fmt.Printf("where a training step's time goes at one thread: %s; OpenBLAS %s kernels\n", prov.Machine, blasimpl.Core())
	var profs []Profile
	todo, err := profileWorkloads(archs)
	if err != nil {
		return err
	}
	for _, w := range todo {
		pf := filepath.Join(tmp, w.arch+".prof")
		env := append(childEnv(), fmt.Sprintf("GOMAXPROCS=%d", runtime.NumCPU()), "GP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1")
		if _, _, err := runChild(env, self, "-child", w.arch, "-batch", fmt.Sprint(w.batch), "-size", fmt.Sprint(w.size),
			"-warmup", fmt.Sprint(w.warmup), "-steps", fmt.Sprint(w.steps), "-min-seconds", fmt.Sprint(minSeconds), "-cpuprofile", pf); err != nil {
			return fmt.Errorf("%s: %w", w.arch, err)
		}
		samples, err := benchutil.ProfileSamples(self, pf)
		if err != nil {
			return fmt.Errorf("%s: %w", w.arch, err)
		}
		p := Profile{Arch: w.arch, Batch: w.batch, Size: w.size}
		p.charge(samples)
		p.print()
		profs = append(profs, p)
	}
	res := map[string]any{
		"what":     "CPU profile of our training step (forward, backward, SGD momentum) at one thread, shares of the sampled CPU time",
		"openblas": blasimpl.Core(),
		"go":       runtime.Version(),
		"profiles": profs,
		"units": map[string]string{
			"share_by_op": "fraction of profiled_cpu_s (so is share_by_kernel)", "batch": "images per step", "size": "pixels per side",
		},
	}
	prov.End()
	prov.Set(res)
	return prov.Save(os.Stdout, out, res)
}

// profileWorkloads is -archs for -profile: the table's workloads by name, or arch:batch:size.
func profileWorkloads(archs string) ([]workload, error) {
	if archs == "" {
		return workloads, nil
	}
	var out []workload
	for _, a := range strings.Split(archs, ",") {
		name, spec, custom := strings.Cut(strings.TrimSpace(a), ":")
		if custom {
			w := workload{arch: name, warmup: 2, steps: 5}
			if _, err := fmt.Sscanf(spec, "%d:%d", &w.batch, &w.size); err != nil || w.batch < 1 || w.size < 1 {
				return nil, fmt.Errorf("-archs %q: want arch:batch:size with positive batch and size", a)
			}
			out = append(out, w)
			continue
		}
		found := false
		for _, w := range workloads {
			if w.arch == name {
				out, found = append(out, w), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-archs %q: not one of the table's workloads; name one as arch:batch:size", a)
		}
	}
	return out, nil
}

// charge sets p's CPU seconds and its shares by op and by kernel from the samples.
func (p *Profile) charge(samples []benchutil.Sample) {
	byOp, byKernel := map[string]float64{}, map[string]float64{}
	var total float64
	for _, s := range samples {
		byOp[s.Op()] += s.Seconds
		byKernel[s.Kernel()] += s.Seconds
		total += s.Seconds
	}
	p.Seconds = total
	p.ByOp, p.ByKernel = shares(byOp, total), shares(byKernel, total)
}

// shares divides each value by total, dropping those under 0.5%, which are summed into
// "the rest".
func shares(v map[string]float64, total float64) map[string]float64 {
	out := map[string]float64{}
	for k, x := range v {
		if s := x / total; s >= 0.005 {
			out[k] = s
		} else {
			out["the rest (each under 0.5%)"] += s
		}
	}
	return out
}

// print writes p as two ranked lists.
func (p Profile) print() {
	fmt.Printf("\n%s (batch %d, %dx%d): %.1f CPU s profiled\n", p.Arch, p.Batch, p.Size, p.Size, p.Seconds)
	for _, part := range []struct {
		name string
		m    map[string]float64
	}{{"by op", p.ByOp}, {"by kernel", p.ByKernel}} {
		keys := make([]string, 0, len(part.m))
		for k := range part.m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return part.m[keys[i]] > part.m[keys[j]] })
		fmt.Printf("  %s:\n", part.name)
		for _, k := range keys {
			fmt.Printf("    %5.1f%%  %s\n", 100*part.m[k], k)
		}
	}
}
