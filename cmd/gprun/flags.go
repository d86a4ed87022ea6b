package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// canonical is the name a flag's PET_ variable is made from: aliases ("nproc_per_node",
// "run-id", "rdzv-host", "r", "t") map to the flag they stand for.
func canonical(name string) string {
	name = strings.ReplaceAll(name, "_", "-")
	switch name {
	case "run-id":
		return "rdzv-id"
	case "rdzv-host":
		return "local-addr"
	case "r":
		return "redirects"
	case "t":
		return "tee"
	}
	return name
}

// envDefaults sets each flag not given on the command line (cli holds the canonical names
// of those that were) from its PET_<NAME> variable (NAME the canonical name in upper case,
// '-' as '_'), as torchrun reads its flags from the variables Kubeflow's PyTorchJob sets.
// --master-addr and --master-port also come from MASTER_ADDR and MASTER_PORT when no PET_
// variable sets them. It returns the variable each flag it set came from.
func envDefaults(fs *flag.FlagSet, cli map[string]bool, getenv func(string) string) (map[string]string, error) {
	from := map[string]string{}
	var errs []string
	set := func(name, env string) {
		if cli[name] || from[name] != "" {
			return
		}
		if v := getenv(env); v != "" {
			if err := fs.Set(name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
			from[name] = env
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if canonical(f.Name) == f.Name {
			set(f.Name, "PET_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
		}
	})
	set("master-addr", "MASTER_ADDR")
	set("master-port", "MASTER_PORT")
	if len(errs) > 0 {
		return from, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return from, nil
}

// parseNNodes reads --nnodes: "N" or "MIN:MAX".
func parseNNodes(s string) (lo, hi int, err error) {
	a, b, elastic := strings.Cut(s, ":")
	if !elastic {
		b = a
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("--nnodes %q: want N or MIN:MAX with 1 <= MIN <= MAX", s)
	}
	return lo, hi, nil
}

// nprocPerNode reads --nproc-per-node: N, "gpu" (one worker per visible GPU), "cpu" (one
// per CPU this process may run on) or "auto" (gpu when there is a GPU, else cpu, as
// torchrun). It returns the count and, for the words, a line saying how it was found.
func nprocPerNode(s string, lookup func(string) (string, bool)) (int, string, error) {
	switch s {
	case "cpu":
		return runtime.NumCPU(), fmt.Sprintf("--nproc-per-node cpu: %d workers, one per CPU", runtime.NumCPU()), nil
	case "gpu", "auto":
		n, how := countGPUs(lookup)
		if n > 0 {
			return n, fmt.Sprintf("--nproc-per-node %s: %d workers, one per GPU (%s)", s, n, how), nil
		}
		if s == "gpu" {
			return 0, "", fmt.Errorf("--nproc-per-node gpu: no GPU (%s)", how)
		}
		return runtime.NumCPU(), fmt.Sprintf("--nproc-per-node auto: no GPU (%s), so %d workers, one per CPU, each with one BLAS thread", how, runtime.NumCPU()), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, "", fmt.Errorf("--nproc-per-node %q: want a number of workers, gpu, cpu or auto", s)
	}
	return n, "", nil
}

var nvidiaDev = regexp.MustCompile(`^nvidia[0-9]+$`)

// countGPUs counts the GPUs the workers can use: CUDA_VISIBLE_DEVICES when set (its
// entries up to the first invalid one, as CUDA reads it), else NVIDIA's device files
// /dev/nvidiaN. The string says which.
func countGPUs(lookup func(string) (string, bool)) (int, string) {
	if v, ok := lookup("CUDA_VISIBLE_DEVICES"); ok {
		n := 0
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" || strings.HasPrefix(item, "-") || item == "NoDevFiles" {
				break
			}
			n++
		}
		return n, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q", v)
	}
	devs, _ := filepath.Glob("/dev/nvidia*")
	n := 0
	for _, d := range devs {
		if nvidiaDev.MatchString(filepath.Base(d)) {
			n++
		}
	}
	if n == 0 {
		return 0, "CUDA_VISIBLE_DEVICES is unset and there is no /dev/nvidiaN"
	}
	return n, fmt.Sprintf("%d /dev/nvidiaN device files", n)
}

// slurmRole is gprun's place when srun started several gprun tasks (one per node): node
// rank SLURM_PROCID of SLURM_NTASKS, the master on the first host of the node list. ok is
// false outside srun or for a single task.
type slurmRole struct {
	nodeRank, nnodes int
	master           string
	port             int
}

func slurmTasks() (slurmRole, bool, error) {
	if os.Getenv("SLURM_PROCID") == "" || os.Getenv("SLURM_NTASKS") == "" || os.Getenv("SLURM_STEP_ID") == "" {
		return slurmRole{}, false, nil
	}
	// comm reads srun's variables the same way for a worker; gprun's node is that worker.
	env, err := launchenv.FromOS()
	if err != nil || env.Launcher != launchenv.SLURM {
		return slurmRole{}, false, err
	}
	if env.WorldSize < 2 {
		return slurmRole{}, false, nil
	}
	return slurmRole{nodeRank: env.Rank, nnodes: env.WorldSize, master: env.MasterAddr, port: env.MasterPort}, true, nil
}

// seconds reads a duration given as seconds ("0.1", "5") or as a Go duration ("100ms").
func seconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 {
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a number of seconds", s)
	}
	return d, nil
}

// rdzvConf reads torchrun's --rdzv-conf: key=value pairs separated by commas.
func rdzvConf(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--rdzv-conf %q: want key=value,key=value", s)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
