package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/trainer"
)

// tinyData writes a 4-class generated ImageFolder (train and val) once per test binary.
var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

func tinyData(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gp-imagenet-test")
		if err != nil {
			tinyErr = err
			return
		}
		tinyDir = filepath.Join(dir, "synth")
		tinyErr = synth.WriteSplit(tinyDir, 4, 24, 8, 20, 3)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

// tinyConfig is resnet18 on tinyData's images at 16x16, the recipe filling in the rest.
func tinyConfig(t *testing.T, out string) Config {
	return Config{
		Data: tinyData(t), DataFormat: "imagefolder", Arch: "resnet18", ImageSize: 16,
		Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9, WeightDecay: -1, Workers: 2,
		Warmup: -1, Smoothing: -1, ClipGrad: -1, Resume: "auto", PrintFreq: 2, Seed: 5,
		Out: out, Keep: 2, Quiet: true,
	}
}

// runWorld runs cfg on world goroutine ranks over in-process groups.
func runWorld(t *testing.T, world int, cfg Config) []*trainer.Result {
	t.Helper()
	groups := comm.NewLocalGroups(world)
	res := make([]*trainer.Result, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Group = groups[r]
			res[r], errs[r] = Run(context.Background(), c, os.Stdout)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}
