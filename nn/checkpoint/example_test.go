package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// Import a PyTorch state dict exported with numpy.savez, then save and reload it.
func Example() {
	ps, _ := nn.NewParamSet(nil, []*nn.Param{
		{Name: "conv1.weight", Shape: []int{4, 3, 3, 3}},
		{Name: "bn1.weight", Shape: []int{4}},
		{Name: "bn1.bias", Shape: []int{4}},
		{Name: "fc.weight", Shape: []int{2, 4}},
		{Name: "fc.bias", Shape: []int{2}},
	}, []*nn.Buffer{
		{Name: "bn1.running_mean", Shape: []int{4}},
		{Name: "bn1.running_var", Shape: []int{4}},
		{Name: "bn1.num_batches_tracked", Shape: []int{}, Int64: make([]int64, 1)},
	})
	entries, err := checkpoint.Load("testdata/tiny_bn.npz")
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := checkpoint.LoadModel(ps, entries)
	fmt.Println("loaded:", rep.OK(), err, "batches tracked:", ps.Buffer("bn1.num_batches_tracked").Int64[0])

	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "epoch1.npz")
	if err := checkpoint.SaveState(path, &checkpoint.State{Model: ps, Epoch: 1}); err != nil {
		fmt.Println(err)
		return
	}
	st := &checkpoint.State{Model: ps}
	_, err = checkpoint.LoadState(path, st)
	fmt.Println("resumed at epoch", st.Epoch, err)
	// Output:
	// loaded: true <nil> batches tracked: 2
	// resumed at epoch 1 <nil>
}
