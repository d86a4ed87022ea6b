package comm_test

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Four in-process ranks average their gradients. A multi-process job builds its group with
// comm.InitFromEnv under gprun instead; the calls are the same.
func Example() {
	ctx := context.Background()
	groups := comm.NewLocalGroups(4)
	results := make([][]float32, len(groups))
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(ctx)
			grad := []float32{float32(g.Rank()), 1}
			if err := g.AllReduce(comm.F32(grad), comm.Avg).Wait(ctx); err != nil {
				fmt.Println(err)
				return
			}
			results[g.Rank()] = grad
		}()
	}
	wg.Wait()
	fmt.Println(results[0], results[3])
	// Output: [1.5 1] [1.5 1]
}

// ZeRO-style sharding: reduce-scatter the gradients, update the local shard, all-gather.
func ExampleGroup_ReduceScatter() {
	ctx := context.Background()
	groups := comm.NewLocalGroups(2)
	var wg sync.WaitGroup
	out := make([][]float32, 2)
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(ctx)
			grad := []float32{1, 2, 3, 4, 5} // 5 elements over 2 ranks: shards of 3 and 2
			lo, hi := comm.ShardRange(len(grad), g.Size(), g.Rank())
			shard := make([]float32, hi-lo)
			if err := g.ReduceScatter(comm.F32(shard), comm.F32(grad), comm.Sum).Wait(ctx); err != nil {
				fmt.Println(err)
				return
			}
			full := make([]float32, len(grad))
			if err := g.AllGather(comm.F32(full), comm.F32(shard)).Wait(ctx); err != nil {
				fmt.Println(err)
				return
			}
			out[g.Rank()] = full
		}()
	}
	wg.Wait()
	fmt.Println(out[0], out[1])
	// Output: [2 4 6 8 10] [2 4 6 8 10]
}

// A buffer that is all-reduced every step (DDP's gradients) comes from AllocFloat32, a
// collective. Under gprun, with every rank on one host, it is shared memory and AllReduce on
// any of its sub-slices runs in place, without staging copies; with in-process ranks, as
// here, or across hosts, it is ordinary memory and the same code runs.
func ExampleAllocFloat32() {
	ctx := context.Background()
	groups := comm.NewLocalGroups(2)
	out := make([][]float32, 2)
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(ctx)
			grads, err := comm.AllocFloat32(ctx, g, 6)
			if err != nil {
				fmt.Println(err)
				return
			}
			for i := range grads {
				grads[i] = float32(g.Rank() + i)
			}
			bucket := grads[2:5] // the same sub-slice on every rank
			if err := g.AllReduce(comm.F32(bucket), comm.Sum).Wait(ctx); err != nil {
				fmt.Println(err)
				return
			}
			out[g.Rank()] = grads
		}()
	}
	wg.Wait()
	fmt.Println(out[0], out[1])
	// Output: [0 1 5 7 9 5] [1 2 5 7 9 6]
}

// A worker reads its place in the job from the variables its launcher set: here those gprun
// and torchrun set for the fourth worker of a job of two nodes with four workers each (set by
// the example itself; under a launcher they are already there). comm.Launched connects
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
	rank, world := comm.Launched()
	fmt.Printf("rank %d of %d: %d samples of each global batch\n", rank, world, globalBatch/world)
	env, err := comm.EnvFromOS()
	if err != nil {
		fmt.Println(err) // names the launcher and what is missing or in conflict
		return
	}
	fmt.Printf("%s: local rank %d of %d, store at %s:%d\n", env.Launcher, env.LocalRank, env.LocalWorldSize, env.MasterAddr, env.MasterPort)
	// Output:
	// rank 3 of 8: 32 samples of each global batch
	// torchrun: local rank 3 of 4, store at node0:29500
}
