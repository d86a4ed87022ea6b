package train_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/train"
)

// fit is the training loop of the README's "Using it" section, which quotes it: change the
// two together. g is comm.InitFromEnv(ctx) in a program run under gprun (one process per
// rank); Example_loop runs the ranks as goroutines over comm.NewLocalGroups.
func fit(ctx context.Context, g comm.Group, ds data.Dataset, epochs int) (*nn.Model, error) {
	const batch = 16
	// A classifier of 1×4×4 images in 4 classes (for ImageNet: models.New("resnet50", 1000)).
	net := nn.Seq(&nn.Flatten{}, &nn.Linear{In: 16, Out: 32}, &nn.ReLU{}, &nn.Linear{In: 32, Out: 4})
	// Parameters in flat buffers; gradients in memory the host's ranks share.
	model, err := nn.NewModel(net, nn.WithSeed(0), ddp.SharedGradients(ctx, g))
	if err != nil {
		return nil, err
	}
	d, err := ddp.New(ctx, model, g) // checks the ranks' models agree, broadcasts rank 0's
	if err != nil {
		return nil, err
	}
	segs, err := optim.Segments(model.Params, 1e-4)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
	if err != nil {
		return nil, err
	}
	c, h, w := ds.Shape()
	prog, err := d.Compile(nn.Classify(batch, []int{c, h, w}, 0), nn.WithOptimizer(opt)) // images, labels → cross-entropy
	if err != nil {
		return nil, err
	}
	defer prog.Close()

	// Each rank its own part of every epoch (torch's DistributedSampler, drop_last=False: the
	// index list is padded so that every rank gets as many samples), in full batches only
	// (the DataLoader's drop_last=True): the graph is compiled for batch samples, and every
	// rank must run the same number of steps.
	sampler, err := data.NewDistributedSampler(ds.Len(), g.Rank(), g.Size(), true, 0, false)
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds, data.WithSampler(sampler), data.WithBatchSize(batch), data.WithDropLast(true))
	if err != nil {
		return nil, err
	}
	labels := make([]float32, batch) // the graph takes class indices as floats
	for epoch := range epochs {
		loader.SetEpoch(epoch) // sampler.set_epoch: a new shuffle, the same on every rank
		for b, err := range loader.Batches(ctx) {
			if err != nil {
				return nil, err
			}
			for i, l := range b.Labels {
				labels[i] = float32(l)
			}
			if err := prog.SetInput("images", b.Images); err != nil {
				return nil, err
			}
			if err := prog.SetInput("labels", labels); err != nil {
				return nil, err
			}
			// Run (forward, backward while gradient buckets all-reduce) then Step (the
			// update, then zeroed gradients), with each bucket updated as its all-reduce lands.
			if err := train.RunStep(ctx, prog); err != nil {
				return nil, err
			}
		}
	}
	return model, nil
}

// The README's training loop with DDP on two ranks: each rank reads its own half of every
// epoch, and both end with the same parameters.
func Example_loop() {
	const world, epochs = 2, 3
	ctx := context.Background()
	groups := comm.NewLocalGroups(world)
	sets := make([]*recording, world)
	models := make([]*nn.Model, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		sets[r] = &recording{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			models[r], errs[r] = fit(ctx, groups[r], sets[r], epochs)
			if err := groups[r].Close(ctx); errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: %v\n", r, err)
			return
		}
	}
	// The loader finishes an epoch's loads before the next epoch starts, so each rank's
	// loads, in order, cut into equal parts are its epochs.
	for epoch := range epochs {
		var parts [world][]int
		for r, set := range sets {
			n := len(set.loads) / epochs
			parts[r] = set.loads[epoch*n : (epoch+1)*n]
		}
		common := 0
		for _, i := range parts[0] {
			if slices.Contains(parts[1], i) {
				common++
			}
		}
		fmt.Printf("epoch %d: rank 0 read %d samples, rank 1 %d, both %d\n", epoch, len(parts[0]), len(parts[1]), common)
	}
	fmt.Println("parameters equal:", slices.Equal(models[0].Params.Data, models[1].Params.Data))
	// Output:
	// epoch 0: rank 0 read 48 samples, rank 1 48, both 0
	// epoch 1: rank 0 read 48 samples, rank 1 48, both 0
	// epoch 2: rank 0 read 48 samples, rank 1 48, both 0
	// parameters equal: true
}

// TestReadmeQuotesFit keeps the README's loop the code Example_loop runs.
func TestReadmeQuotesFit(t *testing.T) {
	src, err := os.ReadFile("example_loop_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fit, _, found := strings.Cut(string(src), "\nfunc fit(")
	fit, _, ended := strings.Cut(string(src[len(fit)+1:]), "\n}\n")
	if !found || !ended {
		t.Fatal("example_loop_test.go: func fit not found")
	}
	if fit += "\n}\n"; !strings.Contains(string(readme), "```go\n"+fit+"```\n") {
		t.Errorf("README.md does not quote fit of example_loop_test.go as it is: copy the function into the \"Using it\" section")
	}
}

// samples is the size of the example's data set: 50 per rank, so 3 batches of 16 and a
// partial batch of 2 that the loader drops.
const samples = 100

// recording is a data set of 1×4×4 images of 4 classes (a bright quadrant per class, plus
// noise) that records which samples it loaded, in order.
type recording struct {
	mu    sync.Mutex
	loads []int
}

func (d *recording) Len() int             { return samples }
func (d *recording) Shape() (c, h, w int) { return 1, 4, 4 }
func (d *recording) Load(_ context.Context, i int, _ *rand.Rand, dst []float32) (int64, error) {
	d.mu.Lock()
	d.loads = append(d.loads, i)
	d.mu.Unlock()
	class := i % 4
	noise := rand.New(rand.NewPCG(uint64(i), 0))
	for p := range dst {
		dst[p] = 0.1 * float32(noise.NormFloat64())
		if y, x := p/4, p%4; y/2 == class/2 && x/2 == class%2 {
			dst[p] += 1
		}
	}
	return int64(class), nil
}
