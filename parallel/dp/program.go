package dp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	G "gorgonia.org/gorgonia"
)

// Program is DataParallel as a train.Program for global batches of a fixed size: SetInput
// takes the whole batch's inputs, Run scatters them over the replicas, runs them and reduces
// their gradients onto the master, Step updates the master (see DataParallel.Step).
type Program struct {
	d      *DataParallel
	n      int
	inputs map[string][]float32
	res    *Result
}

// Program returns the train.Program of d for global batches of n samples, compiling the
// replicas' programs for n's chunks (Chunks(n, len(Devices()))) now: an error names the
// replica that failed to compile.
func (d *DataParallel) Program(n int) (*Program, error) {
	if n <= 0 {
		return nil, fmt.Errorf("dp: program for batches of %d samples", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("dp: Program of a closed DataParallel")
	}
	for i, c := range Chunks(n, len(d.replicas)) {
		if _, err := d.program(d.replicas[i], c); err != nil {
			return nil, fmt.Errorf("dp: replica %d (%s): %w", i, d.replicas[i].dev, err)
		}
	}
	return &Program{d: d, n: n, inputs: map[string][]float32{}}, nil
}

// SetInput copies the global batch's values of the named input (n samples). The length is
// checked against the replicas' graphs: a wrong one is an error that says what was
// expected, and whether data holds a replica's share where the global batch was meant.
func (p *Program) SetInput(name string, data []float32) error {
	if err := p.checkInput(name, len(data)); err != nil {
		return err
	}
	p.inputs[name] = append(p.inputs[name][:0], data...)
	return nil
}

// checkInput checks that got values are the global batch's of input name, from the shape
// the first replica's graph gives it.
func (p *Program) checkInput(name string, got int) error {
	sizes := Chunks(p.n, len(p.d.replicas))
	r := p.d.replicas[0]
	p.d.mu.Lock()
	prog, err := p.d.program(r, sizes[0])
	p.d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("dp: input %q: %w", name, err)
	}
	shape := prog.Compiled().InputShape(name)
	if len(shape) == 0 {
		return fmt.Errorf("dp: the graph declares no input %q", name)
	}
	per := perSample(shape)
	if want := p.n * per; got != want {
		hint := ""
		if got == sizes[0]*per {
			hint = fmt.Sprintf(": that is a replica's share (%d samples); SetInput takes the whole global batch, which DataParallel splits over its %d replicas", sizes[0], len(sizes))
		}
		return fmt.Errorf("dp: input %q takes the global batch of %d samples of %d values (%d values), got %d%s", name, p.n, per, want, got, hint)
	}
	return nil
}

// Run runs the replicas on the batch set by SetInput (DataParallel.Run). After a failed Run,
// LossValue and Output are errors until a Run succeeds.
func (p *Program) Run(ctx context.Context) error {
	p.res = nil
	res, err := p.d.Run(ctx, Batch{N: p.n, Inputs: p.inputs})
	if err != nil {
		return err
	}
	p.res = res
	return nil
}

// Step updates the master and zeroes the gradients (DataParallel.Step).
func (p *Program) Step(ctx context.Context) error { return p.d.Step(ctx) }

// ZeroGrad zeroes the master's gradients.
func (p *Program) ZeroGrad() error { return p.d.ZeroGrad() }

// LossValue is the global batch's loss in the last Run.
func (p *Program) LossValue() (float32, error) {
	if p.res == nil {
		return 0, fmt.Errorf("dp: no loss before Run")
	}
	return p.res.Loss, nil
}

// Output returns a gathered output (WithGather) of the last Run.
func (p *Program) Output(name string) ([]float32, error) {
	if p.res == nil {
		return nil, fmt.Errorf("dp: no output before Run")
	}
	v, ok := p.res.Outputs[name]
	if !ok {
		return nil, fmt.Errorf("dp: output %q is not gathered (gathered: %v; see WithGather)", name, slices.Sorted(maps.Keys(p.res.Outputs)))
	}
	return v, nil
}

// Learnables returns the master's learnables (DataParallel.Learnables).
func (p *Program) Learnables() G.Nodes { return p.d.Learnables() }

// Result is the last Run's full result (chunks, per-replica losses, times).
func (p *Program) Result() *Result { return p.res }

// Close closes the DataParallel.
func (p *Program) Close() error { return p.d.Close() }
