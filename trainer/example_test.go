package trainer_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/trainer"
)

// A linear classifier of 4x4 one-channel images into 2 classes (is the left half
// brighter?), trained on the CPU for two epochs of three steps from a batch function,
// then trained on for a third epoch: the second Fit resumes from the first one's last
// checkpoint.
func Example() {
	dir, err := os.MkdirTemp("", "trainer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	batch := func(_ context.Context, at trainer.BatchAt, b *data.Batch) error {
		*b = data.Batch{Images: make([]float32, at.N*16), Labels: make([]int64, at.N), N: at.N, C: 1, H: 4, W: 4}
		for k := range at.N {
			left := (at.Epoch*7+at.Index*3+k+at.Rank)%2 == 0
			b.Labels[k] = map[bool]int64{false: 0, true: 1}[left]
			for p := range 16 {
				if (p%4 < 2) == left {
					b.Images[k*16+p] = 1
				}
			}
		}
		return nil
	}
	src := trainer.BatchSource{Train: batch, Steps: 3, Val: batch, ValSteps: 1, Shape: [3]int{1, 4, 4}, Classes: 2}
	model := trainer.Module(nn.Seq(&nn.Flatten{}, &nn.Linear{In: 16, Out: 2})).Named("linear")
	fit := func(epochs int) *trainer.Result {
		t, err := trainer.New(trainer.WithEpochs(epochs), trainer.WithBatchSize(8), trainer.WithDir(dir),
			trainer.WithOptimizer(trainer.SGD(0.5, 0.9)), trainer.WithSchedule(trainer.Schedule{Name: "cosine"}),
			trainer.WithOutput(io.Discard), trainer.WithTimelines(0))
		if err != nil {
			log.Fatal(err)
		}
		res, err := t.Fit(context.Background(), model, src)
		if err != nil {
			log.Fatal(err)
		}
		return res
	}
	res := fit(2)
	fmt.Printf("steps %d, top-1 %.0f%%, checkpoint %s\n", res.Steps, res.Top1, filepath.Base(res.Checkpoint))
	res = fit(3)
	fmt.Printf("resumed from %s: steps %d to %d, top-1 %.0f%%\n", filepath.Base(res.ResumedFrom), res.StartStep, res.Steps, res.Top1)
	for _, f := range []string{"metrics.jsonl", "curves.png"} {
		_, err := os.Stat(filepath.Join(dir, f))
		fmt.Println(f, err == nil)
	}
	// Output:
	// steps 6, top-1 100%, checkpoint ckpt-000000006.npz
	// resumed from ckpt-000000006.npz: steps 6 to 9, top-1 100%
	// metrics.jsonl true
	// curves.png true
}
