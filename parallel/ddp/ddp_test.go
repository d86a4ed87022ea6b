package ddp

import (
	"fmt"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Tolerance 1e-5 (relative, per parameter, ‖·‖₂): DDP sums the same float32 gradients in a
// different order than one process on the whole batch (per-rank partial sums, then the
// all-reduce), which moves results by a few ulps per step; five steps stay far below 1e-5.
const equivTol = 1e-5

// Five SGD-momentum steps of world 2 and 3, with and without (Sync)BatchNorm, equal one
// process trained on the concatenated global batch; replicas end bit-identical.
func TestEquivalenceInProcess(t *testing.T) {
	const per, steps = 2, 5
	for _, world := range []int{2, 3} {
		for _, bn := range []bool{false, true} {
			t.Run(fmt.Sprintf("world%d/bn=%v", world, bn), func(t *testing.T) {
				want, err := reference(bn, world, per, steps, 1)
				if err != nil {
					t.Fatal(err)
				}
				opts := []Option{BucketCapBytes(256), FirstBucketBytes(64)}
				if bn {
					opts = append(opts, SyncBatchNorm())
				}
				c := newCluster(t, comm.NewLocalGroups(world), bn, per, opts...)
				if err := c.train(steps, per, 1); err != nil {
					t.Fatal(err)
				}
				for r := range world {
					if err := compareModels(c.models[r], want, equivTol); err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
					if err := sameBits(c.models[r], c.models[0]); err != nil {
						t.Errorf("rank %d vs rank 0: %v", r, err)
					}
				}
				if nb := len(c.ddps[0].Buckets()); nb < 2 {
					t.Errorf("want several buckets with a 256-byte cap, got %d", nb)
				}
			})
		}
	}
}

// NoSync accumulation of 3 micro-batches, then one synchronised step, equals one process
// accumulating the same 3 global micro-batches before each optimizer step.
func TestNoSyncAccumulation(t *testing.T) {
	const world, per, steps, micro = 2, 2, 3, 3
	want, err := reference(false, world, per, steps, micro)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, comm.NewLocalGroups(world), false, per, BucketCapBytes(256))
	if err := c.train(steps, per, micro); err != nil {
		t.Fatal(err)
	}
	for r := range world {
		if err := compareModels(c.models[r], want, equivTol); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
