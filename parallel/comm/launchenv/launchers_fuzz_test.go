package launchenv

import (
	"strings"
	"testing"
)

// FuzzEnv checks that envFrom turns any environment (lines of NAME=value) into an Env or an
// error, never a panic, and that an Env it accepts has its rank inside its world.
func FuzzEnv(f *testing.F) {
	for _, vars := range [][]string{
		{"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "MASTER_ADDR=n0", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=job"},
		{"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_JOB_ID=1234567",
			"SLURM_STEP_NODELIST=node[07-08]", "SLURM_STEP_TASKS_PER_NODE=2(x2)"},
		{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1", "PMIX_NAMESPACE=prterun-host-42@1"},
		{"PET_NODE_RANK=0", "PET_NNODES=2", "MASTER_ADDR=job-master-0", "MASTER_PORT=23456"},
		// A negative node id indexed the task counts at -1 (a panic).
		{"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "SLURM_NODEID=-1", "SLURM_JOB_ID=1",
			"SLURM_STEP_NODELIST=n1", "SLURM_STEP_TASKS_PER_NODE=1"},
	} {
		f.Add(strings.Join(vars, "\n"))
	}
	f.Fuzz(func(t *testing.T, env string) {
		e, err := envFrom(lookIn(strings.Split(env, "\n")...))
		if err == nil && (e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize) {
			t.Fatalf("accepted rank %d of %d", e.Rank, e.WorldSize)
		}
	})
}

// FuzzFirstHost checks that FirstHost never panics and that a host it returns is its own
// first host.
func FuzzFirstHost(f *testing.F) {
	for _, s := range []string{"node01", "node[07,01-03],gpu5", "rack[2-3]-n[004-005]", " a.example.org ", "n[[1]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		h, err := FirstHost(list)
		if err != nil {
			return
		}
		if again, err := FirstHost(h); err != nil || again != h {
			t.Fatalf("FirstHost(%q) = %q, but FirstHost(%q) = %q, %v", list, h, h, again, err)
		}
	})
}

// FuzzExpandCounts checks that expandCounts never panics and stays within its bound.
func FuzzExpandCounts(f *testing.F) {
	for _, s := range []string{"2(x3),1,4(x1)", "2(x", "1(x65536),1(x65536)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := expandCounts(s); err == nil && len(got) > maxTaskCounts {
			t.Fatalf("%q expands to %d counts", s, len(got))
		}
	})
}
