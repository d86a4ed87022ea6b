package zero

import (
	"context"
	"github.com/gorgonia-parallel/gp/train"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// After New the model's ParamSet holds placeholders: ZeroGrad and writes through Data and
// Grad neither crash nor change training (two steps give bit for bit the parameters of
// the same run without them), and Engine.ZeroGrad gives their pages back.
func TestModelPlaceholders(t *testing.T) {
	needMmap(t)
	const world, w, batch = 2, 64, 4
	train := func(scribble bool) ([][]float32, []Memory) {
		groups := comm.NewLocalGroups(world)
		defer closeAll(groups)
		got := make([][]float32, world)
		mems := make([]Memory, world)
		err := each(world, func(r int) error {
			m, err := nn.NewModel(mlp(w), nn.WithSeed(3))
			if err != nil {
				return err
			}
			e, err := New(context.Background(), m, groups[r], WithOptimizer(AdamW(lr)))
			if err != nil {
				return err
			}
			defer e.Close()
			p, err := e.Compile(regress(batch, w))
			if err != nil {
				return err
			}
			defer p.Close()
			for s := range 2 {
				if scribble {
					m.Params.ZeroGrad()
					for i := range m.Params.Data {
						m.Params.Data[i] = 7
					}
					m.Params.Params[0].Grad[0] = 1
				}
				e.ZeroGrad()
				if err := feedMLP(p, s*world+r, batch, w); err != nil {
					return err
				}
				if err := train.RunStep(context.Background(), p); err != nil {
					return err
				}
			}
			mems[r] = e.Memory()
			got[r], err = e.GatherParams(context.Background())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, mems
	}
	clean, _ := train(false)
	dirty, mems := train(true)
	for r := range world {
		for i := range clean[r] {
			if clean[r][i] != dirty[r][i] {
				t.Fatalf("rank %d element %d: %g after writes through the placeholders, %g without", r, i, dirty[r][i], clean[r][i])
			}
		}
		if mems[r].TransientResidentBytes != 0 {
			t.Errorf("rank %d: %d B held between steps after Engine.ZeroGrad", r, mems[r].TransientResidentBytes)
		}
	}
}
