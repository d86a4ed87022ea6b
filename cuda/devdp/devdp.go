// Package devdp is DataParallel over several CUDA devices of one process (PyTorch's
// nn.DataParallel; docs/DESIGN.md §6 and §9): the master device holds the model's parameters and
// optimizer (a tape.State), each step copies the parameters to the other devices' replicas,
// splits the batch along dim 0 as torch.chunk does, runs the replicas concurrently, sums
// their gradients onto the master weighted by chunk size, and steps once on the master.
//
// The replicas are device programs of the same model (cuda/tape), so the result is the
// gradient of the global batch's mean loss, uneven chunks included, as package dp's on the
// CPU. Like PyTorch's, every step moves the parameters out and the gradients back through
// the master: it exists to compare with DDP (cuda/devddp), which reduces in place.
//
// The devices are those of a device list in package dp's vocabulary, opened by Open
// (dp.GPUs(0, 1), the first the master); package dp itself runs replicas on CPUs only.
package devdp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/dp"
	G "gorgonia.org/gorgonia"
)

// BuildFunc builds the model's graph for a chunk of n samples (its inputs have n rows).
type BuildFunc func(b *nn.Builder, n int) (*G.Node, error)

// DataParallel is a model replicated over devices; devs[0] is the master. It is driven from
// one goroutine.
type DataParallel struct {
	devs   []*cuda.Device
	model  *nn.Model
	build  BuildFunc
	states []*tape.State // per device; states[0] has the optimizer
	opts   []nn.BuildOption
}

// New replicates m over devs (at least one; devs[0] is the master, whose State steps with
// opt, an optim.SGD, Adam or AdamW over m's parameters). Every device gets the parameters
// and a gradient buffer; opts are passed to every replica's compilation (replicas other
// than the master's update private copies of BatchNorm's running statistics, as PyTorch's
// DataParallel does).
func New(devs []*cuda.Device, m *nn.Model, build BuildFunc, opt optim.Optimizer, opts ...nn.BuildOption) (*DataParallel, error) {
	if len(devs) == 0 || m == nil || build == nil {
		return nil, fmt.Errorf("devdp: no devices, model or build function")
	}
	p := &DataParallel{devs: devs, model: m, build: build, opts: opts}
	for i, d := range devs {
		var sopts []tape.Option
		if i == 0 {
			sopts = append(sopts, tape.WithOptimizer(opt))
		}
		st, err := tape.NewState(d, m, sopts...)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("devdp: replica %d on device %d: %w", i, d.Ordinal(), err)
		}
		p.states = append(p.states, st)
	}
	return p, nil
}

// Master is the master's device state (its parameters are the model's, on the device).
func (p *DataParallel) Master() *tape.State { return p.states[0] }

// Close frees every device state.
func (p *DataParallel) Close() {
	for _, st := range p.states {
		st.Close()
	}
	p.states = nil
}

// Program compiles the replicas for global batches of n samples, split as dp.Chunks(n,
// len(devs)) (fewer replicas run when there are fewer chunks than devices).
func (p *DataParallel) Program(n int) (*Program, error) {
	chunks := dp.Chunks(n, len(p.devs))
	if len(chunks) == 0 {
		return nil, fmt.Errorf("devdp: batch of %d samples", n)
	}
	prog := &Program{dp: p, n: n, chunks: chunks}
	for i, c := range chunks {
		opts := append([]nn.BuildOption(nil), p.opts...)
		if i > 0 {
			opts = append(opts, nn.WithPrivateBuffers())
		}
		r, err := p.states[i].Compile(func(b *nn.Builder) (*G.Node, error) { return p.build(b, c) }, opts...)
		if err != nil {
			prog.Close()
			return nil, fmt.Errorf("devdp: replica %d (chunk of %d): %w", i, c, err)
		}
		prog.reps = append(prog.reps, r)
	}
	return prog, nil
}

// Program is a DataParallel compiled for one global batch size: train.Program's verbs.
// SetInput splits an input along dim 0; Run copies the master's parameters to the replicas,
// runs them concurrently and adds the weighted gradient sum to the master's gradients; Step
// steps the master and zeroes every replica's gradients; LossValue is the global batch's
// mean loss (the chunk losses weighted by size).
type Program struct {
	dp     *DataParallel
	n      int
	chunks []int
	reps   []*tape.Program
	loss   float32
	ran    bool
	out    []float32
}

// SetInput splits data (n rows) into the replicas' chunks.
func (p *Program) SetInput(name string, data []float32) error {
	if len(data)%p.n != 0 {
		return fmt.Errorf("devdp: input %q holds %d values, not a multiple of the batch size %d", name, len(data), p.n)
	}
	row, lo := len(data)/p.n, 0
	for i, c := range p.chunks {
		if err := p.reps[i].SetInput(name, data[lo*row:(lo+c)*row]); err != nil {
			return fmt.Errorf("devdp: replica %d: %w", i, err)
		}
		lo += c
	}
	return nil
}

// Run runs forward and backward on every replica and reduces onto the master: afterwards
// the master's device gradients hold the gradient of the global batch's mean loss (added to
// what they held). When a replica fails, the error names it and the master's gradients are
// put back as they were (nothing is reduced onto the master, as package dp's ReplicaError).
func (p *Program) Run(ctx context.Context) error {
	master := p.dp.states[0]
	d0 := p.dp.devs[0]
	p.ran = false
	for i := 1; i < len(p.reps); i++ {
		if err := copyAcross(ctx, p.dp.states[i].Params(), master.Params()); err != nil {
			return fmt.Errorf("devdp: parameters to replica %d: %w", i, err)
		}
	}
	// The master's own gradients are kept aside: the replicas' chunks are weighted, and
	// what the buffer held before this Run is not; a failed Run puts them back.
	held, err := d0.Alloc(cuda.Float32, master.Grads().Len())
	if err != nil {
		return fmt.Errorf("devdp: keeping the master's gradients: %w", err)
	}
	defer held.Free()
	if err := d0.Scale(held, master.Grads(), 1); err != nil {
		return fmt.Errorf("devdp: keeping the master's gradients: %w", err)
	}
	errs := make([]error, len(p.reps))
	var wg sync.WaitGroup
	for i, r := range p.reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = p.dp.states[i].ZeroGrad(); errs[i] == nil {
				errs[i] = r.Run(ctx)
			}
		}()
	}
	wg.Wait()
	err = p.reduce(ctx, held, errs)
	if err != nil {
		if rerr := d0.Scale(master.Grads(), held, 1); rerr != nil {
			err = errors.Join(err, fmt.Errorf("devdp: putting the master's gradients back: %w", rerr))
		}
	}
	return err
}

// reduce is Run's end once the replicas have run (errs are their errors): the master's
// gradients become held + Σ_i (n_i/N)·g_i and the loss the chunks' weighted mean.
func (p *Program) reduce(ctx context.Context, held *cuda.Tensor, errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("devdp: replica %d: %w", i, errors.Join(errs...))
		}
	}
	master := p.dp.states[0]
	d0 := p.dp.devs[0]
	var loss float64
	for i := range p.reps {
		w := float32(p.chunks[i]) / float32(p.n)
		l, err := p.reps[i].LossValue()
		if err != nil {
			return fmt.Errorf("devdp: replica %d: %w", i, err)
		}
		loss += float64(w) * float64(l)
		if i == 0 {
			// master = held + w0·master
			if err := d0.Axpby(master.Grads(), held, 1, w); err != nil {
				return fmt.Errorf("devdp: gradients of replica 0: %w", err)
			}
			continue
		}
		tmp, err := d0.Alloc(cuda.Float32, master.Grads().Len())
		if err != nil {
			return fmt.Errorf("devdp: gradients of replica %d: %w", i, err)
		}
		err = copyAcross(ctx, tmp, p.dp.states[i].Grads())
		if err == nil {
			err = d0.Axpby(master.Grads(), tmp, w, 1)
		}
		tmp.Free()
		if err != nil {
			return fmt.Errorf("devdp: gradients of replica %d: %w", i, err)
		}
	}
	p.loss, p.ran = float32(loss), true
	return nil
}

// Step steps the master's optimizer on the device and zeroes its gradients.
func (p *Program) Step(ctx context.Context) error { return p.dp.states[0].Step(ctx) }

// ZeroGrad zeroes the master's gradients.
func (p *Program) ZeroGrad() error { return p.dp.states[0].ZeroGrad() }

// LossValue is the global batch's mean loss in the last Run.
func (p *Program) LossValue() (float32, error) {
	if !p.ran {
		return 0, fmt.Errorf("devdp: no loss before Run")
	}
	return p.loss, nil
}

// Output returns the named output of the last Run, the replicas' chunks concatenated along
// dim 0 (the gather to PyTorch's output_device), in memory valid until the next Output.
func (p *Program) Output(name string) ([]float32, error) {
	if !p.ran {
		return nil, fmt.Errorf("devdp: no output %s before Run", name)
	}
	p.out = p.out[:0]
	for i, r := range p.reps {
		v, err := r.Output(name)
		if err != nil {
			return nil, fmt.Errorf("devdp: replica %d: %w", i, err)
		}
		p.out = append(p.out, v...)
	}
	return p.out, nil
}

// Close closes the replicas' programs.
func (p *Program) Close() error {
	var errs []error
	for _, r := range p.reps {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// copyAcross copies src into dst (same length) between devices: both streams are drained
// first, then the driver copies (under unified addressing a device-to-device copy may span
// devices).
func copyAcross(ctx context.Context, dst, src *cuda.Tensor) error {
	if dst.Len() != src.Len() {
		return fmt.Errorf("copy of %d floats into %d", src.Len(), dst.Len())
	}
	return cuda.CopyAcross(ctx, dst, src)
}
