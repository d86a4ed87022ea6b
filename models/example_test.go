package models_test

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
)

// Build an architecture by name; its parameters are torchvision's.
func ExampleNew() {
	mod, err := models.New("resnet50", 1000)
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := nn.NewModel(mod, nn.WithSeed(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Params.NumParams(), m.Params.Params[0].Name, m.Params.Params[0].Shape)
	// Output: 25557032 conv1.weight [64 3 7 7]
}

// Import weights exported from PyTorch with numpy.savez(path, **state_dict) and run the model
// once in eval mode.
func ExampleLoadWeights() {
	mod, err := swin.New(swin.Config{EmbedDim: 12, Depths: []int{2, 2, 2}, Heads: []int{2, 2, 4}, NumClasses: 5})
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := models.LoadWeights(m.Params, "testdata/swin_weights.npz"); err != nil {
		fmt.Println(err)
		return
	}
	x := make([]float32, 2*3*56*56)
	out, err := models.Run(m, x, []int{2, 3, 56, 56}, nil, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("logits", out.Shape)
	// Output: logits [2 5]
}
