package amp_test

import (
	"context"
	"fmt"
	"math/rand"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
)

// Train a small conv net with fp16 autocast (the classifier head kept in float32) and a
// GradScaler: the graph is built once with the loss scaled; each step unscales the flat
// gradient buffer, clips, steps unless an inf/NaN was found, and updates the scale. The
// first steps' scales (from 2^24) overflow fp16 gradients: those steps are skipped and the
// scale backs off until it fits; each time it grows back to 2^21 it overflows again.
func Example() {
	net := &nn.Sequential{
		Names: []string{"conv", "bn", "relu", "pool", "flat", "fc"},
		Layers: []nn.Module{
			&nn.Conv2d{In: 3, Out: 8, Kernel: [2]int{3, 3}, Padding: [2]int{1, 1}},
			&nn.BatchNorm2d{C: 8}, &nn.ReLU{}, &nn.AdaptiveAvgPool2d{}, &nn.Flatten{},
			&nn.Linear{In: 8, Out: 4},
		},
	}
	model, err := nn.NewModel(net, nn.WithSeed(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	scaler, err := amp.NewGradScaler(amp.WithInitScale(1<<24), amp.WithGrowthInterval(3))
	if err != nil {
		fmt.Println(err)
		return
	}
	build := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", 8, 3, 6, 6)
		if err != nil {
			return nil, err
		}
		y, err := b.Input("labels", 8)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		loss, err := ops.CrossEntropy(logits, y, 0)
		if err != nil {
			return nil, err
		}
		b.Output("loss", loss)
		return scaler.ScaleLoss(b, loss)
	}
	policy := amp.Autocast(amp.FP16, amp.Except("fc"))
	prog, err := nn.Compile(model, build, nn.WithAutocast(policy))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer prog.Close()
	segs, _ := optim.Segments(model.Params, 0)
	opt, _ := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))

	rng := rand.New(rand.NewSource(2))
	x, _ := prog.Input("images")
	y, _ := prog.Input("labels")
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(i % 4)
	}
	var first, last float32
	for step := 0; step < 12; step++ {
		model.Params.ZeroGrad()
		if err := prog.Run(context.Background()); err != nil {
			fmt.Println(err)
			return
		}
		scale := scaler.Scale()
		if inf := scaler.Unscale(model.Params.Grad); !inf {
			if _, err := optim.ClipGradNorm(segs, 5); err != nil { // clip the true gradients
				fmt.Println(err)
				return
			}
		}
		skipped, err := scaler.Step(opt)
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := scaler.Update(); err != nil {
			fmt.Println(err)
			return
		}
		loss, _ := prog.Output("loss")
		if step == 0 || skipped {
			fmt.Printf("step %d: scale %g skipped %v\n", step, scale, skipped)
		}
		if step == 0 {
			first = loss[0]
		}
		last = loss[0]
	}
	fmt.Println("loss decreased:", last < first, "final scale:", scaler.Scale())
	// Output:
	// step 0: scale 1.6777216e+07 skipped true
	// step 1: scale 8.388608e+06 skipped true
	// step 2: scale 4.194304e+06 skipped true
	// step 3: scale 2.097152e+06 skipped true
	// step 7: scale 2.097152e+06 skipped true
	// step 11: scale 2.097152e+06 skipped true
	// loss decreased: true final scale: 1.048576e+06
}
