package launchenv_test

import (
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// A worker reads its place in the job from the variables its launcher set: here those gprun
// and torchrun set for the fourth worker of a job of two nodes with four workers each (set by
// the example itself; under a launcher they are already there). Launched connects
// nothing, so a program can size its share of the batch before it builds its graph;
// comm.InitFromEnv then joins the group at the store the variables name. srun's, mpirun's
// and a Kubeflow PyTorchJob's variables are read the same way.
func ExampleLaunched() {
	for k, v := range map[string]string{
		"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job1",
	} {
		prev, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func() {
			if had {
				os.Setenv(k, prev)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	const globalBatch = 256
	rank, world := launchenv.Launched()
	fmt.Printf("rank %d of %d: %d samples of each global batch\n", rank, world, globalBatch/world)
	env, err := launchenv.FromOS()
	if err != nil {
		fmt.Println(err) // names the launcher and what is missing or in conflict
		return
	}
	fmt.Printf("%s: local rank %d of %d, store at %s:%d\n", env.Launcher, env.LocalRank, env.LocalWorldSize, env.MasterAddr, env.MasterPort)
	// Output:
	// rank 3 of 8: 32 samples of each global batch
	// torchrun: local rank 3 of 4, store at node0:29500
}
