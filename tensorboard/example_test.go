package tensorboard_test

import (
	"fmt"
	"os"

	"github.com/gorgonia-parallel/gp/tensorboard"
)

// Example logs a training loss per step and a validation accuracy per epoch, as a trainer's
// rank 0 does, and reads the file back.
func Example() {
	dir, _ := os.MkdirTemp("", "runs")
	defer os.RemoveAll(dir)
	w, err := tensorboard.NewWriter(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	for step := int64(1); step <= 3; step++ {
		w.Scalar("train/loss", step, 2.0/float64(step))
	}
	w.Scalar("val/top1", 3, 0.875)
	if err := w.Close(); err != nil {
		fmt.Println(err)
		return
	}
	evs, err := tensorboard.ReadFile(w.Path())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(evs[0].FileVersion)
	for _, e := range evs[1:] {
		fmt.Printf("step %d %s %.4g\n", e.Step, e.Values[0].Tag, e.Values[0].Value)
	}
	// Output:
	// brain.Event:2
	// step 1 train/loss 2
	// step 2 train/loss 1
	// step 3 train/loss 0.6667
	// step 3 val/top1 0.875
}
