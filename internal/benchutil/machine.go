package benchutil

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Machine says where a figure was measured: the CPU model, the SIMD flags that matter to the
// kernels, the cores, OPENBLAS_CORETYPE when the machine sets it, and the load average when
// it was read.
type Machine struct {
	CPU      string   `json:"cpu"`
	Flags    []string `json:"flags"`
	Cores    int      `json:"cores"`
	CoreType string   `json:"openblas_coretype,omitempty"`
	Load     float64  `json:"load_avg_1m"`
}

// ReadMachine reads Machine from /proc/cpuinfo (CPU and flags are empty off Linux).
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), CoreType: os.Getenv("OPENBLAS_CORETYPE"), Load: LoadAvg()}
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if m.CPU == "" {
				m.CPU = strings.TrimSpace(v)
			}
		case "flags":
			if m.Flags == nil {
				have := map[string]bool{}
				for _, f := range strings.Fields(v) {
					have[f] = true
				}
				m.Flags = []string{}
				for _, f := range []string{"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16"} {
					if have[f] {
						m.Flags = append(m.Flags, f)
					}
				}
			}
		}
	}
	return m
}

// String is the machine in one line, for the head of a table.
func (m Machine) String() string {
	s := m.CPU + ", " + strings.Join(m.Flags, " ") + ", " + itoa(m.Cores) + " cores, load " + ftoa(m.Load)
	if m.CoreType != "" {
		s += ", OPENBLAS_CORETYPE=" + m.CoreType
	}
	return s
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// TorchEnv returns env (os.Environ's form) for a PyTorch process of a benchmark: where env
// does not set OPENBLAS_CORETYPE, it is set to the kernels this process's OpenBLAS runs
// (core, blasimpl.Core()), so that PyTorch's OpenBLAS (Debian's torch links the same
// library) runs them too rather than its own choice, which is its generic kernels on a CPU
// it does not know. A machine's own OPENBLAS_CORETYPE stays, for both.
func TorchEnv(env []string, core string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") {
			return env
		}
	}
	if core == "" {
		return env
	}
	return append(slices.Clone(env), "OPENBLAS_CORETYPE="+core)
}
