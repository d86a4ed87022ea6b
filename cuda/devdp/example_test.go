package devdp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/gorgonia-parallel/gp/cuda/devdp"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
)

// DataParallel over GPUs 0 and 1 of this process, as torch.nn.DataParallel(model,
// device_ids=[0, 1]): each step scatters the batch of 64 images in two chunks of 32, and the
// optimizer steps once, on GPU 0. It needs two GPUs and cgo, so it is compiled but not run by
// go test; the package's tests run the same calls on the fake driver's two devices.
func Example() {
	ctx := context.Background()
	devs, err := devdp.Open(dp.GPUs(0, 1))
	if err != nil {
		log.Fatal(err) // e.g. "devdp: replica 1 on cuda:1: ... invalid device ordinal"
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	root, err := resnet.New(resnet.Config{Block: resnet.Basic, Layers: [4]int{2, 2, 2, 2}, NumClasses: 10})
	if err != nil {
		log.Fatal(err)
	}
	m, err := nn.NewModel(root, nn.WithSeed(1))
	if err != nil {
		log.Fatal(err)
	}
	segs, err := optim.Segments(m.Params, 1e-4) // weight decay 1e-4
	if err != nil {
		log.Fatal(err)
	}
	sgd, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
	if err != nil {
		log.Fatal(err)
	}
	shape := []int{3, 32, 32}
	rep, err := devdp.New(devs, m, func(b *nn.Builder, n int) (*G.Node, error) { return nn.Classify(n, shape, 0)(b) }, sgd)
	if err != nil {
		log.Fatal(err)
	}
	defer rep.Close()
	const batch = 64
	p, err := rep.Program(batch)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	images, labels := make([]float32, batch*3*32*32), make([]float32, batch)
	for step := range 10 {
		// ... fill images and labels with the next batch ...
		if err := p.SetInput("images", images); err != nil {
			log.Fatal(err)
		}
		if err := p.SetInput("labels", labels); err != nil {
			log.Fatal(err)
		}
		if err := train.RunStep(ctx, p); err != nil { // Run, then Step (which zeroes the gradients)
			log.Fatal(err)
		}
		loss, _ := p.LossValue()
		fmt.Printf("step %d: loss %.4f\n", step, loss)
	}
	// The parameters live on GPU 0; copy them to m for a checkpoint or an eval on the CPU.
	if err := rep.Master().ToHost(ctx); err != nil {
		log.Fatal(err)
	}
}
