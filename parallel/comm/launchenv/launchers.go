package launchenv

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Launchers whose environment FromOS understands (Env.Launcher).
//
// Note [Which launcher's variables]: a worker can inherit the variables of several launchers
// at once: gprun under srun sees gprun's RANK and the srun task's SLURM_PROCID; mpirun inside
// a SLURM allocation sets OMPI_COMM_WORLD_RANK while SLURM_PROCID describes the batch step.
// The nearest launcher wins:
//
//  1. torchrun's variables with TORCHELASTIC_RUN_ID: an agent (gprun, torchrun) started this
//     process; the others describe the agent's own task and are not read.
//  2. OMPI_COMM_WORLD_RANK: mpirun (also when it runs inside a SLURM job).
//  3. SLURM_PROCID: a task of srun.
//  4. RANK and WORLD_SIZE without an agent: set by hand or by Kubeflow's PyTorchJob, whose
//     PET_* variables are checked against them.
//  5. PET_NODE_RANK and PET_NNODES alone: a PyTorchJob pod with one worker.
//
// torchrun's own variables, when set, take precedence over the launcher's (MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK...); a RANK or WORLD_SIZE that disagrees with the launcher's is an
// error naming both, since one of them is stale (an exported RANK in a batch script).
const (
	Torchrun = "torchrun" // RANK, WORLD_SIZE, ... from gprun, torchrun or by hand
	SLURM    = "slurm"    // srun: SLURM_PROCID, SLURM_NTASKS, ...
	OpenMPI  = "openmpi"  // mpirun: OMPI_COMM_WORLD_RANK, ...
	Kubeflow = "kubeflow" // a PyTorchJob pod: PET_NODE_RANK, PET_NNODES, ...
)

// SLURMPortBase is where the master port of a SLURM job without MASTER_PORT starts: the port
// is SLURMPortBase + SLURM_JOB_ID mod 10000, the same on every task of the job and different
// for jobs whose ids differ in their last four digits (as PyTorch Lightning chooses it). It
// stays below Linux's ephemeral ports (32768 and up).
const SLURMPortBase = 15000

// DefaultMasterPort is the master port of an mpirun job on one node without MASTER_PORT and
// without a job id to derive one from (torch's default port).
const DefaultMasterPort = 29500

// lookupFunc reads one environment variable (os.LookupEnv in FromOS).
type lookupFunc func(string) (string, bool)

// envReader reads integers and strings from a lookupFunc, collecting the errors.
type envReader struct {
	look lookupFunc
	errs []error
}

func (r *envReader) str(name string) string {
	v, _ := r.look(name)
	return strings.TrimSpace(v)
}

func (r *envReader) has(name string) bool { return r.str(name) != "" }

// num returns the integer in name, or def when it is unset; required makes unset an error.
func (r *envReader) num(name string, def int, required bool) int {
	v := r.str(name)
	if v == "" {
		if required {
			r.errs = append(r.errs, fmt.Errorf("%s is not set", name))
		}
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q is not an integer", name, v))
		return def
	}
	return n
}

func (r *envReader) err() error { return errors.Join(r.errs...) }

// envFrom is FromOS over look; see Note [Which launcher's variables].
func envFrom(look lookupFunc) (Env, error) {
	r := &envReader{look: look}
	torch := r.has("RANK") || r.has("WORLD_SIZE")
	switch {
	case torch && r.has("TORCHELASTIC_RUN_ID"):
		return torchrunEnv(r, Torchrun)
	case r.has("OMPI_COMM_WORLD_RANK"):
		e, err := openMPIEnv(r)
		return checkAgainstTorchrun(r, e, err)
	case r.has("SLURM_PROCID"):
		e, err := slurmEnv(r)
		return checkAgainstTorchrun(r, e, err)
	case torch:
		return kubeflowEnv(r)
	case r.has("PET_NODE_RANK") || r.has("PET_NNODES"):
		return kubeflowEnv(r)
	}
	return Env{}, fmt.Errorf("launchenv: %w: RANK is not set (nor SLURM_PROCID, "+
		"OMPI_COMM_WORLD_RANK or PET_NODE_RANK); start the workers with gprun, torchrun, srun or mpirun", ErrNoLauncher)
}

// torchrunEnv reads torchrun's variables; RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are
// required.
func torchrunEnv(r *envReader, launcher string) (Env, error) {
	e := Env{Launcher: launcher, From: "RANK, WORLD_SIZE"}
	e.Rank = r.num("RANK", 0, true)
	e.WorldSize = r.num("WORLD_SIZE", 1, true)
	e.LocalRank = r.num("LOCAL_RANK", e.Rank, false)
	e.LocalWorldSize = r.num("LOCAL_WORLD_SIZE", e.WorldSize, false)
	e.GroupRank = r.num("GROUP_RANK", 0, false)
	e.MasterPort = r.num("MASTER_PORT", 0, true)
	e.RestartCount = r.num("TORCHELASTIC_RESTART_COUNT", 0, false)
	e.MasterAddr = r.str("MASTER_ADDR")
	e.RunID = r.str("TORCHELASTIC_RUN_ID")
	if e.MasterAddr == "" {
		r.errs = append(r.errs, errors.New("MASTER_ADDR is not set"))
	}
	return e.finish(r, "torchrun environment")
}

// finish checks the rank against the world size and wraps the collected errors with what
// was detected.
func (e Env) finish(r *envReader, what string) (Env, error) {
	if len(r.errs) == 0 && (e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize) {
		r.errs = append(r.errs, fmt.Errorf("rank %d (from %s) is outside the world of %d", e.Rank, e.From, e.WorldSize))
	}
	if err := r.err(); err != nil {
		return e, fmt.Errorf("launchenv: %s: %w", what, err)
	}
	return e, nil
}

// slurmEnv reads the variables srun gives each task. The master is MASTER_ADDR or the first
// host of the step's (or job's) node list; the port MASTER_PORT or SLURMPortBase plus the job
// id's last four digits.
func slurmEnv(r *envReader) (Env, error) {
	e := Env{Launcher: SLURM, From: "SLURM_PROCID, SLURM_NTASKS"}
	e.Rank = r.num("SLURM_PROCID", 0, true)
	e.WorldSize = r.num("SLURM_NTASKS", 1, true)
	e.LocalRank = r.num("SLURM_LOCALID", 0, true)
	e.GroupRank = r.num("SLURM_NODEID", 0, true)
	e.RestartCount = r.num("SLURM_RESTART_COUNT", 0, false)
	e.RunID = r.str("SLURM_JOB_ID")
	for _, v := range []struct {
		name string
		n    int
	}{{"SLURM_LOCALID", e.LocalRank}, {"SLURM_NODEID", e.GroupRank}} {
		if v.n < 0 {
			r.errs = append(r.errs, fmt.Errorf("%s=%d is negative", v.name, v.n))
		}
	}
	e.LocalWorldSize = slurmLocalSize(r, e)
	e.MasterAddr = r.str("MASTER_ADDR")
	if e.MasterAddr == "" {
		list, name := "", ""
		for _, name = range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if list = r.str(name); list != "" {
				break
			}
		}
		if list == "" {
			r.errs = append(r.errs, errors.New("no master: MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST or SLURM_JOB_NODELIST"))
		} else if host, err := FirstHost(list); err != nil {
			r.errs = append(r.errs, fmt.Errorf("no master: %s: %w", name, err))
		} else {
			e.MasterAddr = host
		}
	}
	if r.has("MASTER_PORT") {
		e.MasterPort = r.num("MASTER_PORT", 0, true)
	} else if id := r.num("SLURM_JOB_ID", -1, false); id >= 0 {
		e.MasterPort = SLURMPortBase + id%10000
	} else {
		r.errs = append(r.errs, errors.New("no master port: MASTER_PORT is not set and neither is SLURM_JOB_ID"))
	}
	return e.finish(r, "SLURM environment (srun)")
}

// slurmLocalSize is the number of tasks on this node: this node's entry of
// SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), "2(x3),1" meaning 2,2,2,1; all of them
// on a one-node step; 0 (unknown: the transport defaults to TCP) otherwise.
func slurmLocalSize(r *envReader, e Env) int {
	for _, name := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		if v := r.str(name); v != "" {
			if counts, err := expandCounts(v); err == nil && e.GroupRank >= 0 && e.GroupRank < len(counts) {
				return counts[e.GroupRank]
			}
		}
	}
	for _, name := range []string{"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"} {
		if v := r.str(name); v != "" {
			if v == "1" {
				return e.WorldSize
			}
			break
		}
	}
	return 0
}

// maxTaskCounts bounds the nodes a task count list may expand to (SLURM's own limit on a
// job's nodes is far below it).
const maxTaskCounts = 1 << 20

// expandCounts expands SLURM's compressed count list: "2(x3),1" is [2 2 2 1].
func expandCounts(s string) ([]int, error) {
	var out []int
	for item := range strings.SplitSeq(s, ",") {
		count, rep := item, "1"
		if i := strings.Index(item, "(x"); i >= 0 && strings.HasSuffix(item, ")") {
			count, rep = item[:i], item[i+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(count)
		n, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 1 || n > 1<<16 {
			return nil, fmt.Errorf("bad task count %q in %q", item, s)
		}
		if len(out)+n > maxTaskCounts {
			return nil, fmt.Errorf("task counts %q expand to more than %d nodes", s, maxTaskCounts)
		}
		for range n {
			out = append(out, c)
		}
	}
	return out, nil
}

// FirstHost returns the first host of a SLURM host list in its compressed syntax:
// "node[01-03,07],gpu5" is node01, node02, node03, node07, gpu5, so FirstHost returns
// "node01" (zero padding kept). Several bracket groups in one name ("r[1-2]n[3-4]") take the
// first value of each.
func FirstHost(list string) (string, error) {
	list = strings.TrimSpace(list)
	var b strings.Builder
	depth := 0
	first := false // inside a bracket group, still in its first value
	for i, c := range list {
		switch {
		case c == '[':
			if depth > 0 {
				return "", fmt.Errorf("host list %q: nested '[' at offset %d", list, i)
			}
			depth, first = 1, true
		case c == ']':
			if depth == 0 {
				return "", fmt.Errorf("host list %q: ']' without '[' at offset %d", list, i)
			}
			depth = 0
		case depth > 0:
			if c == '-' || c == ',' {
				first = false
			} else if first {
				b.WriteRune(c)
			}
		case c == ',':
			return checkHost(list, b.String(), depth)
		default:
			b.WriteRune(c)
		}
	}
	return checkHost(list, b.String(), depth)
}

// checkHost checks the host FirstHost assembled: letters, digits, '-', '.' and '_' only
// (a host name, or an IPv4 address), surrounding spaces dropped.
func checkHost(list, host string, depth int) (string, error) {
	host = strings.TrimSpace(host)
	switch {
	case depth > 0:
		return "", fmt.Errorf("host list %q: '[' without ']'", list)
	case host == "":
		return "", fmt.Errorf("host list %q: no host", list)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("host list %q: host %q has %q, not allowed in a host name", list, host, c)
		}
	}
	return host, nil
}

// openMPIEnv reads the variables mpirun gives each process. The master is MASTER_ADDR; on one
// node (every rank local) 127.0.0.1. The port is MASTER_PORT, else one derived from the job's
// id (the same on every rank), else DefaultMasterPort.
func openMPIEnv(r *envReader) (Env, error) {
	e := Env{Launcher: OpenMPI, From: "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"}
	e.Rank = r.num("OMPI_COMM_WORLD_RANK", 0, true)
	e.WorldSize = r.num("OMPI_COMM_WORLD_SIZE", 1, true)
	e.LocalRank = r.num("OMPI_COMM_WORLD_LOCAL_RANK", 0, true)
	e.LocalWorldSize = r.num("OMPI_COMM_WORLD_LOCAL_SIZE", 0, false)
	if e.LocalWorldSize > 0 && e.WorldSize%e.LocalWorldSize == 0 {
		// mpirun places ranks by slot by default: node after node, each filled in turn.
		e.GroupRank = e.Rank / e.LocalWorldSize
	}
	e.MasterAddr = r.str("MASTER_ADDR")
	switch {
	case e.MasterAddr != "":
	case e.LocalWorldSize > 0 && e.LocalWorldSize == e.WorldSize:
		e.MasterAddr = "127.0.0.1"
	default:
		r.errs = append(r.errs, fmt.Errorf("MASTER_ADDR is not set and the job spans several nodes "+
			"(OMPI_COMM_WORLD_LOCAL_SIZE=%q of OMPI_COMM_WORLD_SIZE=%d): pass rank 0's host, e.g. mpirun -x MASTER_ADDR=HOST -x MASTER_PORT=PORT",
			r.str("OMPI_COMM_WORLD_LOCAL_SIZE"), e.WorldSize))
	}
	e.RunID = mpiJobID(r)
	switch {
	case r.has("MASTER_PORT"):
		e.MasterPort = r.num("MASTER_PORT", 0, true)
	case e.RunID != "":
		h := fnv.New32a()
		h.Write([]byte(e.RunID))
		e.MasterPort = SLURMPortBase + int(h.Sum32()%10000)
	default:
		e.MasterPort = DefaultMasterPort
	}
	return e.finish(r, "OpenMPI environment (mpirun)")
}

// mpiJobID returns an id of the mpirun job that every rank sees alike: PMIx's namespace
// (OpenMPI 4 and 5), or ORTE's job id (OpenMPI 3 and 4).
func mpiJobID(r *envReader) string {
	for _, name := range []string{"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"} {
		if v := r.str(name); v != "" {
			return v
		}
	}
	return ""
}

// kubeflowEnv reads a process started without an agent: torchrun's variables set by hand, or
// by Kubeflow's PyTorchJob, which sets RANK to the pod's rank, WORLD_SIZE to pods times
// PET_NPROC_PER_NODE, and the PET_* variables that torchrun reads as its flags.
func kubeflowEnv(r *envReader) (Env, error) {
	pet := r.has("PET_NODE_RANK") || r.has("PET_NNODES") || r.has("PET_NPROC_PER_NODE")
	if !pet {
		return torchrunEnv(r, Torchrun)
	}
	if n := r.str("PET_NPROC_PER_NODE"); n != "" && n != "1" && !r.has("LOCAL_RANK") {
		return Env{Launcher: Kubeflow}, fmt.Errorf("launchenv: Kubeflow PyTorchJob environment: PET_NPROC_PER_NODE=%s asks for %s workers per pod, "+
			"and RANK=%q is the pod's rank, not a worker's: start the workers with gprun in the pod (it reads PET_*)", n, n, r.str("RANK"))
	}
	e := Env{Launcher: Kubeflow, From: "PET_NODE_RANK, PET_NNODES"}
	e.Rank = r.num("PET_NODE_RANK", 0, !r.has("RANK"))
	e.WorldSize = petNodes(r)
	if r.has("RANK") {
		e.Rank, e.From = r.num("RANK", 0, true), "RANK, WORLD_SIZE"
		if r.has("PET_NODE_RANK") && r.num("PET_NODE_RANK", e.Rank, false) != e.Rank {
			r.errs = append(r.errs, fmt.Errorf("RANK=%s (torchrun variable) but PET_NODE_RANK=%s (Kubeflow)", r.str("RANK"), r.str("PET_NODE_RANK")))
		}
	}
	if r.has("WORLD_SIZE") {
		e.WorldSize = r.num("WORLD_SIZE", 1, true)
	}
	e.LocalRank = r.num("LOCAL_RANK", 0, false)
	e.LocalWorldSize = r.num("LOCAL_WORLD_SIZE", 1, false)
	e.GroupRank = e.Rank
	e.RestartCount = r.num("TORCHELASTIC_RESTART_COUNT", 0, false)
	e.RunID = r.str("TORCHELASTIC_RUN_ID")
	e.MasterAddr = firstSet(r, "MASTER_ADDR", "PET_MASTER_ADDR")
	if e.MasterAddr == "" {
		r.errs = append(r.errs, errors.New("MASTER_ADDR is not set (nor PET_MASTER_ADDR)"))
	}
	switch {
	case r.has("MASTER_PORT"):
		e.MasterPort = r.num("MASTER_PORT", 0, true)
	case r.has("PET_MASTER_PORT"):
		e.MasterPort = r.num("PET_MASTER_PORT", 0, true)
	default:
		r.errs = append(r.errs, errors.New("MASTER_PORT is not set (nor PET_MASTER_PORT)"))
	}
	return e.finish(r, "Kubeflow PyTorchJob environment")
}

// petNodes is the number of pods: PET_NNODES, "N" or "MIN:MAX" (an elastic job's pod count
// is only known to an agent: the maximum is taken and the rendezvous checks it).
func petNodes(r *envReader) int {
	v := r.str("PET_NNODES")
	if v == "" {
		return r.num("WORLD_SIZE", 1, true)
	}
	if _, hi, ok := strings.Cut(v, ":"); ok {
		v = hi
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("PET_NNODES=%q is not N or MIN:MAX", r.str("PET_NNODES")))
		return 1
	}
	return n
}

func firstSet(r *envReader, names ...string) string {
	for _, n := range names {
		if v := r.str(n); v != "" {
			return v
		}
	}
	return ""
}

// checkAgainstTorchrun applies torchrun's variables set without an agent on top of a
// launcher's environment e: LOCAL_RANK and LOCAL_WORLD_SIZE take precedence (MASTER_ADDR and
// MASTER_PORT already did); a RANK or WORLD_SIZE that disagrees with the launcher's is an
// error naming both values and where each came from.
func checkAgainstTorchrun(r *envReader, e Env, err error) (Env, error) {
	if err != nil {
		return e, err
	}
	from := strings.Split(e.From, ", ")
	var bad []string
	for i, v := range []struct {
		name string
		have int
	}{{"RANK", e.Rank}, {"WORLD_SIZE", e.WorldSize}} {
		s := r.str(v.name)
		if n, perr := strconv.Atoi(s); s != "" && (perr != nil || n != v.have) {
			bad = append(bad, fmt.Sprintf("%s=%s (torchrun variable, without gprun or torchrun) but %s=%d (%s)", v.name, s, from[i], v.have, e.Launcher))
		}
	}
	if len(bad) > 0 {
		return e, fmt.Errorf("launchenv: conflicting launcher environments: %s; unset RANK and WORLD_SIZE, or start the workers through gprun",
			strings.Join(bad, "; "))
	}
	e.LocalRank = r.num("LOCAL_RANK", e.LocalRank, false)
	e.LocalWorldSize = r.num("LOCAL_WORLD_SIZE", e.LocalWorldSize, false)
	return e, r.err()
}
