package ddp

import (
	"context"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// SharedGradients is an nn.NewModel option that places the model's gradient buffer in
// memory shared with the other ranks of g on this host (comm.AllocFloat32). DDP's bucket
// all-reduces then read the peers' gradients and write the averages in place, with half
// the memory traffic of the staged copies, which leaves more of the memory bandwidth to
// backward. It changes nothing else: without shared memory (TCP, other hosts, /dev/shm
// full) the buffer is ordinary memory.
//
// Creating the model is then a collective: every rank creates it in the same order
// relative to its other collectives, before New. Create optimizers after the model, as
// always (they view its gradient buffer).
//
//	g, _ := comm.InitFromEnv(ctx)
//	m, _ := nn.NewModel(arch, nn.WithSeed(0), ddp.SharedGradients(ctx, g))
//	d, _ := ddp.New(ctx, m, g)
func SharedGradients(ctx context.Context, g comm.Group) nn.ModelOption {
	return nn.WithGradAllocator(func(n int) ([]float32, error) { return comm.AllocFloat32(ctx, g, n) })
}
