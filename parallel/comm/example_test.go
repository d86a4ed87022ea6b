package comm_test

import (
	"context"
	"fmt"
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
