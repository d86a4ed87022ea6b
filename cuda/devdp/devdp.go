// Package devdp is DataParallel's device backend: package dp's DataParallel (the split as
// torch.chunk, the weights, the gather, failures, the verbs; docs/DESIGN.md §6 and §9) with
// its replicas on several CUDA devices of one process, as PyTorch's nn.DataParallel. The
// master device holds the model's parameters and optimizer (a tape.State); each step copies
// the parameters to the other devices' replicas, runs the replicas concurrently, and sums
// their gradients onto the master weighted by chunk size; Step steps once, on the master.
//
//	devs, err := devdp.Open(dp.GPUs(0, 1))         // the first is the master
//	d, err := dp.New(m, build, dp.WithBackend(devdp.NewBackend(devs...)),
//		dp.WithBuildOptions(nn.WithOptimizer(opt))) // optim's SGD, Adam or AdamW
//	p, err := d.Program(n)
//	for each batch { p.SetInput(...); err = train.RunStep(ctx, p) }
//
// Like PyTorch's, every step moves the parameters out and the gradients back through the
// master: it exists to compare with DDP (cuda/devddp), which reduces in place.
package devdp

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/dp"
)

// Backend is dp.Backend on CUDA devices: replica i runs on device i's tape.State, the first
// the master's, whose State steps with the optimizer of the build options. Give it to one
// DataParallel (dp.WithBackend), which closes it.
type Backend struct {
	devs   []*cuda.Device
	states []*tape.State // by replica; states[0] has the optimizer
	held   *cuda.Tensor  // on the master: its gradients before the Run (dp.Backend.Begin)
	tmp    *cuda.Tensor  // on the master: a replica's gradients, copied across
}

// NewBackend returns the backend over devs (at least one; devs[0] is the master), for
// dp.WithBackend. The devices are the caller's, to close after the DataParallel.
func NewBackend(devs ...*cuda.Device) *Backend { return &Backend{devs: devs} }

// Master is the master's device state: its parameters are the model's, on the device
// (ToHost copies them to the model's ParamSet.Data); its gradients are the reduced ones.
// It is nil before dp.New accepted the backend.
func (b *Backend) Master() *tape.State {
	if len(b.states) == 0 {
		return nil
	}
	return b.states[0]
}

// Devices returns dp.GPUs of the devices' ordinals.
func (b *Backend) Devices() []dp.Device {
	out := make([]dp.Device, len(b.devs))
	for i, d := range b.devs {
		out[i] = dp.Device{Kind: dp.GPU, Index: d.Ordinal()}
	}
	return out
}

// Accept makes every device's State (parameters and a gradient buffer). The master's State
// steps with the build options' nn.WithOptimizer (optim's SGD, Adam or AdamW), which it takes
// at the master's first Compile; Accept refuses, naming the option, what a State cannot step
// (tape.OptimizerOf: nn.WithSolver, another optimizer) and dp.WithReduceWorkers (the sum
// runs on the master device).
func (b *Backend) Accept(m *nn.Model, s dp.Settings) error {
	const who = "the device backend (cuda/devdp)"
	if len(b.devs) == 0 || b.states != nil {
		return fmt.Errorf("%s: no devices, or already given to a DataParallel", who)
	}
	if s.ReduceWorkers != 0 {
		return fmt.Errorf("dp.WithReduceWorkers(%d): %s sums the gradients on the master device, not with host goroutines: leave it out", s.ReduceWorkers, who)
	}
	if _, err := tape.OptimizerOf(s.BuildOptions...); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	for i, d := range b.devs {
		st, err := tape.NewState(d, m)
		if err != nil {
			b.Close()
			return fmt.Errorf("devdp: replica %d on device %d: %w", i, d.Ordinal(), err)
		}
		b.states = append(b.states, st)
	}
	n := b.states[0].Grads().Len()
	var err error
	if b.held, err = b.devs[0].Alloc(cuda.Float32, n); err == nil {
		b.tmp, err = b.devs[0].Alloc(cuda.Float32, n)
	}
	if err != nil {
		b.Close()
		return fmt.Errorf("devdp: the master's reduction buffers (2×%d floats) on device %d: %w", n, b.devs[0].Ordinal(), err)
	}
	return nil
}

// Compile compiles replica i on its device's State. The master's (replica 0's) State takes
// the optimizer of the build options; the other replicas' programs are compiled without it.
func (b *Backend) Compile(i int, build nn.BuildFunc, opts ...nn.BuildOption) (dp.Executor, error) {
	if i > 0 {
		opts = append(opts[:len(opts):len(opts)], nn.WithOptimizer(nil), nn.WithSolver(nil))
	}
	tp, err := b.states[i].Compile(build, opts...)
	if err != nil {
		return nil, err
	}
	return exec{Program: tp}, nil
}

// Begin copies the master's parameters to replicas 1 to n-1 and, when training, keeps the
// master's gradients aside: replica 0 computes its chunk's in the master's buffer.
func (b *Backend) Begin(ctx context.Context, n int, training bool) error {
	for i := 1; i < n; i++ {
		if err := cuda.CopyAcross(ctx, b.states[i].Params(), b.states[0].Params()); err != nil {
			return fmt.Errorf("devdp: parameters to replica %d: %w", i, err)
		}
	}
	if !training {
		return nil
	}
	if err := b.devs[0].Scale(b.held, b.states[0].Grads(), 1); err != nil {
		return fmt.Errorf("devdp: keeping the master's gradients: %w", err)
	}
	return nil
}

// Reduce makes the master's gradients held + Σ_i ws[i]·g_i, replica 0's in place and the
// others' copied across to the master device first.
func (b *Backend) Reduce(ctx context.Context, _ []dp.Executor, ws []float32) error {
	master, d0 := b.states[0].Grads(), b.devs[0]
	err := d0.Axpby(master, b.held, 1, ws[0]) // master = held + w0·master
	for i := 1; i < len(ws) && err == nil; i++ {
		if err = cuda.CopyAcross(ctx, b.tmp, b.states[i].Grads()); err == nil {
			err = d0.Axpby(master, b.tmp, ws[i], 1)
		}
		if err != nil {
			err = fmt.Errorf("devdp: gradients of replica %d: %w", i, err)
		}
	}
	if err != nil {
		return errors.Join(err, b.Abort())
	}
	return nil
}

// Abort copies the gradients Begin kept back into the master's buffer.
func (b *Backend) Abort() error {
	if err := b.devs[0].Scale(b.states[0].Grads(), b.held, 1); err != nil {
		return fmt.Errorf("devdp: putting the master's gradients back: %w", err)
	}
	return nil
}

// Step steps the master State's optimizer on the device and zeroes its gradients.
func (b *Backend) Step(ctx context.Context) error { return b.states[0].Step(ctx) }

// ZeroGrad zeroes the master's gradients.
func (b *Backend) ZeroGrad() error { return b.states[0].ZeroGrad() }

// Close frees every device State and the reduction buffers.
func (b *Backend) Close() error {
	for _, st := range b.states {
		st.Close()
	}
	b.held.Free()
	b.tmp.Free()
	b.states, b.held, b.tmp = nil, nil, nil
	return nil
}

// exec is a tape program as a dp.Executor.
type exec struct{ *tape.Program }

func (x exec) Compiled() *nn.Program { return x.CPU() }

// Run zeroes the replica State's gradients (training) and runs the program.
func (x exec) Run(ctx context.Context) error {
	if x.CPU().Builder.Training() {
		if err := x.State().ZeroGrad(); err != nil {
			return err
		}
	}
	return x.Program.Run(ctx)
}
