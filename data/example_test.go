package data_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// Example trains-style iteration: a synthetic ImageFolder split, rank 0 of 2 through a
// DistributedSampler, two workers, 32x32 RandomResizedCrop batches.
func Example() {
	dir, _ := os.MkdirTemp("", "synth")
	defer os.RemoveAll(dir)
	if err := synth.WriteSplit(dir, 4, 10, 2, 48, 1); err != nil {
		fmt.Println(err)
		return
	}
	train, err := data.NewImageFolder(filepath.Join(dir, "train"), data.WithTransform(transforms.Train(32)))
	if err != nil {
		fmt.Println(err)
		return
	}
	sampler, _ := data.NewDistributedSampler(train.Len(), 0, 2, true, 0, false)
	loader, _ := data.NewLoader(train, data.WithBatchSize(8), data.WithWorkers(2), data.WithSampler(sampler), data.WithSeed(0))
	for epoch := 0; epoch < 2; epoch++ {
		loader.SetEpoch(epoch)
		n := 0
		for b, err := range loader.Batches(context.Background()) {
			if err != nil {
				fmt.Println(err)
				return
			}
			n += b.N
			if epoch == 0 && n == b.N {
				fmt.Printf("batch: %d images of %dx%dx%d, %d labels\n", b.N, b.C, b.H, b.W, len(b.Labels))
			}
		}
		fmt.Printf("epoch %d: %d samples on this rank\n", epoch, n)
	}
	// Output:
	// batch: 8 images of 3x32x32, 8 labels
	// epoch 0: 20 samples on this rank
	// epoch 1: 20 samples on this rank
}
