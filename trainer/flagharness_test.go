package trainer

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

func tinyFlagConfig(t *testing.T, out string) Config {
	return Config{
		Data: tinyData(t), DataFormat: "imagefolder", Arch: "resnet18", ImageSize: 16,
		Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9, WeightDecay: -1, Workers: 2,
		Warmup: -1, Smoothing: -1, ClipGrad: -1, Resume: "auto", PrintFreq: 2, Seed: 5,
		Out: out, Keep: 2, Quiet: true,
	}
}

func runFlagWorld(t *testing.T, world int, cfg Config) []*Result {
	t.Helper()
	groups := comm.NewLocalGroups(world)
	res := make([]*Result, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			c := cfg
			c.Group = groups[r]
			res[r], errs[r] = Run(context.Background(), c, os.Stdout)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}
