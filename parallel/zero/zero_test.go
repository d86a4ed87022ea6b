package zero

import (
	"fmt"
	"testing"
)

// Five AdamW steps of ZeRO-3 on world in-process ranks (per = 2 samples each) equal one
// process on the global batch and DDP, rel ≤ 1e-5 per parameter (float32 rounding of the
// different reduction orders; AdamW's kernel is bit-identical to optim's). Without
// BatchNorm at world 2, 3, 4; with BatchNorm (SyncBatchNorm on both sides) at world 2.
func TestEquivalence(t *testing.T) {
	const per, steps = 2, 5
	cases := []struct {
		world int
		bn    bool
	}{{2, false}, {3, false}, {4, false}, {2, true}}
	for _, c := range cases {
		t.Run(fmt.Sprintf("world%d/bn=%v", c.world, c.bn), func(t *testing.T) {
			want, err := reference(c.bn, c.world, per, steps)
			if err != nil {
				t.Fatal(err)
			}
			dd, err := trainDDP(c.bn, c.world, per, steps)
			if err != nil {
				t.Fatal(err)
			}
			z, err := trainZero(c.bn, c.world, per, steps, WithUnitDepth(1))
			if err != nil {
				t.Fatal(err)
			}
			init, err := reference(c.bn, c.world, per, 0)
			if err != nil {
				t.Fatal(err)
			}
			if compareParams(z.params[0], nil, init, 1e-3) == nil {
				t.Fatal("parameters did not move in 5 steps: the comparison would prove nothing")
			}
			for r := range c.world {
				if err := compareParams(z.params[r], z.models[r], want, equivTol); err != nil {
					t.Errorf("rank %d vs one process: %v", r, err)
				}
				if err := compareParams(z.params[r], z.models[r], dd, equivTol); err != nil {
					t.Errorf("rank %d vs DDP: %v", r, err)
				}
				if st := z.progs[r].Stats(); r == 0 {
					t.Logf("units %d, last step %v, gather wait %v, reduce wait %v, peak %d B", len(z.engines[r].Units()), st.Run, st.GatherWait, st.ReduceWait, st.PeakBytes)
				}
			}
		})
	}
}
