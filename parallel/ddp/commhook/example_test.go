package commhook_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/ddp/commhook"
)

// A hook reduces one bucket over the group; DDP calls it (ddp.WithCommHook(hook)) as each
// bucket's gradients are ready. Here two in-process ranks reduce their buckets with the fp16
// hook directly: each holds the average of the ranks' gradients in half precision.
func ExampleFP16Compress() {
	groups := comm.NewLocalGroups(2)
	hook := commhook.FP16Compress()
	grads := [][]float32{{1, 0.1, 1000}, {3, 0.2, 3000}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close(context.Background())
			b := &ddp.Bucket{Index: 0, Hi: len(grads[r]), Grad: grads[r]}
			if err := hook.Reduce(g, b).Wait(context.Background()); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(grads[0], grads[1])
	// Output: [2 0.14990234 2000] [2 0.14990234 2000]
}

// PowerSGD is configured with options named after torch's PowerSGDState fields; it refuses
// settings torch refuses.
func ExamplePowerSGD() {
	hook, err := commhook.PowerSGD(commhook.PowerSGDRank(2), commhook.PowerSGDStartIter(100))
	fmt.Println(hook != nil, err)
	_, err = commhook.PowerSGD(commhook.PowerSGDStartIter(1))
	fmt.Println(err)
	// Output:
	// true <nil>
	// commhook: PowerSGD start iteration 1: must be > 1 with error feedback or warm start (as torch): comm: invalid argument
}
