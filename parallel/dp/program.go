package dp

import (
	"context"
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

// Program returns the train.Program of d for global batches of n samples.
func (d *DataParallel) Program(n int) (*Program, error) {
	if n <= 0 {
		return nil, fmt.Errorf("dp: program for batches of %d samples", n)
	}
	return &Program{d: d, n: n, inputs: map[string][]float32{}}, nil
}

// SetInput copies the global batch's values of the named input (n samples).
func (p *Program) SetInput(name string, data []float32) error {
	if len(data) == 0 || len(data)%p.n != 0 {
		return fmt.Errorf("dp: input %q holds %d values, not a positive multiple of the batch size %d", name, len(data), p.n)
	}
	p.inputs[name] = append(p.inputs[name][:0], data...)
	return nil
}

// Run runs the replicas on the batch set by SetInput (DataParallel.Run).
func (p *Program) Run(ctx context.Context) error {
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
func (p *Program) ZeroGrad() { p.d.ZeroGrad() }

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
