package launchenv

import (
	"fmt"
	"strings"
	"testing"
)

// lookIn is a lookupFunc over "NAME=value" pairs.
func lookIn(vars ...string) lookupFunc {
	m := map[string]string{}
	for _, v := range vars {
		k, val, _ := strings.Cut(v, "=")
		m[k] = val
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnvLaunchers(t *testing.T) {
	gprun := []string{"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
		"MASTER_ADDR=n0", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=job", "TORCHELASTIC_RESTART_COUNT=2"}
	slurm := []string{"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1", "SLURM_NODEID=1",
		"SLURM_JOB_ID=1234567", "SLURM_STEP_NODELIST=node[07-08]", "SLURM_JOB_NODELIST=node[01-08]",
		"SLURM_STEP_TASKS_PER_NODE=2(x2)"}
	ompi := []string{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
		"OMPI_COMM_WORLD_LOCAL_SIZE=2", "PMIX_NAMESPACE=prterun-host-42@1"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	for _, tc := range []struct {
		name string
		vars []string
		want Env    // compared when wantErr is empty
		err  string // substrings of the error, "|"-separated
	}{
		{name: "gprun", vars: gprun, want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, GroupRank: 1,
			MasterAddr: "n0", MasterPort: 29500, RestartCount: 2, RunID: "job", Launcher: "torchrun", From: "RANK, WORLD_SIZE"}},
		{name: "gprun under srun: the agent's variables win", vars: with(gprun, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_NODEID=1"),
			want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, GroupRank: 1, MasterAddr: "n0", MasterPort: 29500,
				RestartCount: 2, RunID: "job", Launcher: "torchrun", From: "RANK, WORLD_SIZE"}},
		{name: "torchrun by hand, single node", vars: []string{"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"},
			want: Env{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 1, Launcher: "torchrun", From: "RANK, WORLD_SIZE"}},
		{name: "nothing", vars: nil, err: "RANK is not set|SLURM_PROCID|OMPI_COMM_WORLD_RANK"},
		{name: "torchrun missing master", vars: []string{"RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=x"}, err: "torchrun environment|MASTER_ADDR is not set|MASTER_PORT is not set"},
		{name: "rank outside world", vars: []string{"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=a", "MASTER_PORT=1"}, err: "rank 2 (from RANK, WORLD_SIZE) is outside the world of 2"},

		{name: "slurm", vars: slurm, want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, GroupRank: 1,
			MasterAddr: "node07", MasterPort: 15000 + 4567, RunID: "1234567", Launcher: "slurm", From: "SLURM_PROCID, SLURM_NTASKS"}},
		{name: "slurm, master from the job list and MASTER_PORT", vars: with(slurm[:5], "SLURM_JOB_NODELIST=gpu[003-004,9],cpu1", "MASTER_PORT=4000"),
			want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, GroupRank: 1, MasterAddr: "gpu003", MasterPort: 4000, RunID: "1234567",
				Launcher: "slurm", From: "SLURM_PROCID, SLURM_NTASKS"}},
		{name: "slurm one node, MASTER_ADDR wins", vars: []string{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_NODEID=0",
			"SLURM_JOB_ID=7", "SLURM_STEP_NUM_NODES=1", "SLURM_JOB_NODELIST=n1", "MASTER_ADDR=10.0.0.1"},
			want: Env{WorldSize: 2, LocalWorldSize: 2, MasterAddr: "10.0.0.1", MasterPort: 15007, RunID: "7", Launcher: "slurm", From: "SLURM_PROCID, SLURM_NTASKS"}},
		{name: "slurm missing", vars: []string{"SLURM_PROCID=0"}, err: "SLURM environment (srun)|SLURM_NTASKS is not set|SLURM_LOCALID is not set|no master: MASTER_ADDR is not set|no master port"},
		{name: "slurm bad node list", vars: with(slurm[:5], "SLURM_JOB_NODELIST=node[01-03"), err: "SLURM_JOB_NODELIST: host list \"node[01-03\": '[' without ']'"},
		{name: "RANK exported against srun's", vars: with(slurm, "RANK=0", "WORLD_SIZE=8"),
			err: "conflicting launcher environments|RANK=0 (torchrun variable, without gprun or torchrun) but SLURM_PROCID=3 (slurm)|WORLD_SIZE=8 (torchrun variable, without gprun or torchrun) but SLURM_NTASKS=4 (slurm)"},
		{name: "RANK agreeing with srun's", vars: with(slurm, "RANK=3", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=4"),
			want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 4, GroupRank: 1,
				MasterAddr: "node07", MasterPort: 19567, RunID: "1234567", Launcher: "slurm", From: "SLURM_PROCID, SLURM_NTASKS"}},

		{name: "openmpi one node", vars: ompi, want: Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1",
			MasterPort: ompiPort("prterun-host-42@1"), RunID: "prterun-host-42@1", Launcher: "openmpi", From: "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"}},
		{name: "openmpi inside a SLURM allocation", vars: with(ompi, "SLURM_PROCID=0", "SLURM_NTASKS=1", "MASTER_PORT=5"),
			want: Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1",
				MasterPort: 5, RunID: "prterun-host-42@1", Launcher: "openmpi", From: "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"}},
		{name: "openmpi several nodes without MASTER_ADDR", vars: []string{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4",
			"OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2"}, err: "OpenMPI environment (mpirun)|MASTER_ADDR is not set and the job spans several nodes|mpirun -x MASTER_ADDR"},
		{name: "openmpi several nodes", vars: []string{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4",
			"OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=h0"},
			want: Env{Rank: 2, WorldSize: 4, LocalWorldSize: 2, GroupRank: 1, MasterAddr: "h0", MasterPort: DefaultMasterPort,
				Launcher: "openmpi", From: "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"}},

		{name: "kubeflow pod, one worker", vars: []string{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=job-master-0", "MASTER_PORT=23456",
			"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=1", "PET_MASTER_ADDR=job-master-0", "PET_MASTER_PORT=23456"},
			want: Env{Rank: 1, WorldSize: 2, LocalWorldSize: 1, GroupRank: 1, MasterAddr: "job-master-0", MasterPort: 23456,
				Launcher: "kubeflow", From: "RANK, WORLD_SIZE"}},
		{name: "kubeflow PET only", vars: []string{"PET_NNODES=1:3", "PET_NODE_RANK=2", "PET_MASTER_ADDR=m", "PET_MASTER_PORT=1"},
			want: Env{Rank: 2, WorldSize: 3, LocalWorldSize: 1, GroupRank: 2, MasterAddr: "m", MasterPort: 1,
				Launcher: "kubeflow", From: "PET_NODE_RANK, PET_NNODES"}},
		{name: "kubeflow pod with 4 workers per pod, no agent", vars: []string{"RANK=1", "WORLD_SIZE=8", "PET_NPROC_PER_NODE=4",
			"PET_NNODES=2", "PET_NODE_RANK=1", "MASTER_ADDR=m", "MASTER_PORT=1"}, err: "Kubeflow PyTorchJob environment|PET_NPROC_PER_NODE=4|start the workers with gprun"},
		{name: "kubeflow RANK against PET_NODE_RANK", vars: []string{"RANK=0", "WORLD_SIZE=2", "PET_NODE_RANK=1", "PET_NNODES=2", "MASTER_ADDR=m", "MASTER_PORT=1"},
			err: "RANK=0 (torchrun variable) but PET_NODE_RANK=1 (Kubeflow)"},
		{name: "kubeflow missing master", vars: []string{"PET_NNODES=2", "PET_NODE_RANK=0"}, err: "Kubeflow PyTorchJob environment|MASTER_ADDR is not set (nor PET_MASTER_ADDR)|MASTER_PORT is not set (nor PET_MASTER_PORT)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envFrom(lookIn(tc.vars...))
			if tc.err != "" {
				if err == nil {
					t.Fatalf("no error, want %q; got %+v", tc.err, got)
				}
				for _, want := range strings.Split(tc.err, "|") {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q\ndoes not contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func ompiPort(id string) int {
	e, _ := openMPIEnv(&envReader{look: lookIn("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1",
		"OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=1", "PMIX_NAMESPACE="+id)})
	return e.MasterPort
}

func TestFirstHost(t *testing.T) {
	for _, tc := range []struct{ list, want, err string }{
		{"node01", "node01", ""},
		{"node[01-03,07]", "node01", ""},
		{"node[07,01-03],gpu5", "node07", ""},
		{"gpu5,node[1-2]", "gpu5", ""},
		{"rack[2-3]-n[004-005]", "rack2-n004", ""},
		{" a.example.org ", "a.example.org", ""},
		{"node[1-2", "", "'[' without ']'"},
		{"node1-2]", "", "']' without '['"},
		{"n[[1]]", "", "nested '['"},
		{"", "", "no host"},
		{",n1", "", "no host"},
	} {
		got, err := FirstHost(tc.list)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("FirstHost(%q) = %q, %v; want error %q", tc.list, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", tc.list, got, err, tc.want)
		}
	}
}

func TestExpandCounts(t *testing.T) {
	got, err := expandCounts("2(x3),1,4(x1)")
	if err != nil || fmt.Sprint(got) != "[2 2 2 1 4]" {
		t.Errorf("expandCounts = %v, %v; want [2 2 2 1 4]", got, err)
	}
	if _, err := expandCounts("2(x"); err == nil {
		t.Error("expandCounts(\"2(x\"): no error")
	}
}
