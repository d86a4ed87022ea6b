package launchenv

import (
	"errors"
	"os"
)

// Env is the process's place in the job, as torchrun (and gprun) describe it in environment
// variables.
type Env struct {
	Rank           int    // RANK: global rank
	WorldSize      int    // WORLD_SIZE
	LocalRank      int    // LOCAL_RANK: rank on this node
	LocalWorldSize int    // LOCAL_WORLD_SIZE: ranks on this node
	GroupRank      int    // GROUP_RANK: the node's rank
	MasterAddr     string // MASTER_ADDR: host of rank 0's store
	MasterPort     int    // MASTER_PORT
	RestartCount   int    // TORCHELASTIC_RESTART_COUNT
	RunID          string // TORCHELASTIC_RUN_ID

	// Launcher names whose variables these are (Torchrun, SLURM, ...), From the variables
	// Rank and WorldSize came from ("SLURM_PROCID, SLURM_NTASKS"), for error messages. Both
	// are empty in an Env built by hand.
	Launcher, From string
}

// ErrNoLauncher is wrapped by FromOS's error when no launcher's variables are set at all:
// the process was started by hand, as one process.
var ErrNoLauncher = errors.New("no launcher's environment")

// Launched returns this process's rank and the world size as its launcher's environment
// gives them (see FromOS): 0 and 1 when no launcher started it, or when the variables are
// malformed (comm.InitFromEnv then reports what is wrong). It reads the environment only; it
// connects nothing, so a program can size its share of the batch before it builds its graph.
func Launched() (rank, world int) {
	env, err := FromOS()
	if err != nil || env.WorldSize < 1 {
		return 0, 1
	}
	return env.Rank, env.WorldSize
}

// FromOS reads Env from the environment of the launcher that started this process:
// gprun or torchrun (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT required; LOCAL_RANK and
// LOCAL_WORLD_SIZE default to a single node), SLURM's srun (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID; the master is the first host of the node list, its port
// MASTER_PORT or SLURMPortBase plus the job id's last four digits), OpenMPI's mpirun
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK; MASTER_ADDR is needed across nodes) or a
// Kubeflow PyTorchJob pod (RANK, WORLD_SIZE, MASTER_ADDR or PET_*). MASTER_ADDR and
// MASTER_PORT, when set, win over what a launcher implies. See Note [Which launcher's
// variables] for the order when several are present; an error names the launcher detected
// and what is missing, or both values of a conflict and where each came from.
func FromOS() (Env, error) {
	return envFrom(os.LookupEnv)
}
