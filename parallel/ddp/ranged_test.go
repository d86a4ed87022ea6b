package ddp

import (
	"testing"

	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// plainOpt hides the optimizer's ranged methods: Program.Step then runs one opt.Step after
// the last reduction.
type plainOpt struct{ optim.Optimizer }

// Program.Step with an optimizer that steps bucket by bucket (as each reduction completes)
// gives the same bits as one optimizer step after the last reduction, for SGD with momentum
// (whose first step initialises its buffers) and AdamW, and records one optimizer event
// per bucket.
func TestRangedStepSameBits(t *testing.T) {
	const world, per, steps = 2, 2, 3
	for _, kind := range []string{"sgd", "adamw"} {
		t.Run(kind, func(t *testing.T) {
			train := func(ranged bool) *cluster {
				c := newCluster(t, comm.NewLocalGroups(world), true, per, BucketCapBytes(256), FirstBucketBytes(64))
				for r, m := range c.models {
					if kind == "adamw" {
						segs, err := optim.Segments(m.Params, 1e-2, optim.Merged())
						if err != nil {
							t.Fatal(err)
						}
						if c.opts[r], err = optim.NewAdamW(segs, 1e-2); err != nil {
							t.Fatal(err)
						}
					}
					if !ranged {
						c.opts[r] = plainOpt{c.opts[r]}
					}
				}
				if err := c.train(steps, per, 1); err != nil {
					t.Fatal(err)
				}
				return c
			}
			a, b := train(true), train(false)
			for r := range world {
				if err := sameBits(a.models[r], b.models[r]); err != nil {
					t.Errorf("rank %d: ranged step vs one step: %v", r, err)
				}
			}
			nb := len(a.ddps[0].Buckets())
			perStep := map[int]int{}
			for _, e := range a.ddps[0].Timeline().Events() {
				if e.Name == timeline.EvOptimizer && e.Bucket >= 0 {
					perStep[e.Step]++
				}
			}
			// Step 0 runs with the buckets before the rebuild, which may differ in number.
			for s := 1; s < steps; s++ {
				if perStep[s] != nb {
					t.Errorf("step %d: %d per-bucket optimizer events, want %d (buckets)", s, perStep[s], nb)
				}
			}
			if nb < 2 {
				t.Errorf("want several buckets, got %d", nb)
			}
		})
	}
}
