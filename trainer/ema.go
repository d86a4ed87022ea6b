package trainer

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// modelEMA is -model-ema: an exponential moving average of the model's weights (timm's
// ModelEmaV2), updated after every optimizer step as ema = d·ema + (1-d)·w over the
// parameters and the float buffers (BatchNorm's running statistics; counters are not
// averaged). The average is evaluated by swapping it into the model (swapped) and saved in
// checkpoints under "train.ema.params" and "train.ema.buffers" (stateful).
type modelEMA struct {
	ps      *nn.ParamSet
	decay   float32
	params  []float32
	buffers []float32 // the float buffers, concatenated in ps.Buffers order
	spare   []float32 // the trained weights while the average is swapped in
}

// newModelEMA starts the average at ps's current weights.
func newModelEMA(ps *nn.ParamSet, decay float64) *modelEMA {
	e := &modelEMA{ps: ps, decay: float32(decay)}
	e.reset()
	return e
}

// reset sets the average to the model's weights.
func (e *modelEMA) reset() {
	e.params = append(e.params[:0], e.ps.Data...)
	e.buffers = e.buffers[:0]
	for _, b := range e.ps.Buffers {
		e.buffers = append(e.buffers, b.Data...)
	}
}

// update folds the model's current weights into the average.
func (e *modelEMA) update() {
	d := e.decay
	for i, w := range e.ps.Data {
		e.params[i] = d*e.params[i] + (1-d)*w
	}
	off := 0
	for _, b := range e.ps.Buffers {
		avg := e.buffers[off : off+len(b.Data)]
		for i, w := range b.Data {
			avg[i] = d*avg[i] + (1-d)*w
		}
		off += len(b.Data)
	}
}

// swap exchanges the model's weights with the average.
func (e *modelEMA) swap() {
	e.spare = append(e.spare[:0], e.ps.Data...)
	copy(e.ps.Data, e.params)
	copy(e.params, e.spare)
	off := 0
	for _, b := range e.ps.Buffers {
		avg := e.buffers[off : off+len(b.Data)]
		for i := range b.Data {
			b.Data[i], avg[i] = avg[i], b.Data[i]
		}
		off += len(b.Data)
	}
}

// swapped runs fn with the average in the model's place, and puts the trained weights back.
func (e *modelEMA) swapped(fn func() error) error {
	e.swap()
	defer e.swap()
	return fn()
}

// stateful returns s with the average added to its state dict: a checkpoint of s then holds
// the average, and loading one without it (a run that had no -model-ema) starts the average
// at the loaded weights.
func (e *modelEMA) stateful(s checkpoint.Stateful) checkpoint.Stateful { return emaState{s, e} }

type emaState struct {
	checkpoint.Stateful
	e *modelEMA
}

func (s emaState) StateDict() []nn.StateEntry {
	return append(s.Stateful.StateDict(),
		nn.StateEntry{Name: "train.ema.params", Shape: []int{len(s.e.params)}, F32: s.e.params},
		nn.StateEntry{Name: "train.ema.buffers", Shape: []int{len(s.e.buffers)}, F32: s.e.buffers})
}

func (s emaState) LoadStateDict(entries []nn.StateEntry) error {
	if err := s.Stateful.LoadStateDict(entries); err != nil {
		return err
	}
	var params, buffers *nn.StateEntry
	for i := range entries {
		switch entries[i].Name {
		case "train.ema.params":
			params = &entries[i]
		case "train.ema.buffers":
			buffers = &entries[i]
		}
	}
	if params == nil && buffers == nil {
		s.e.reset() // the model's weights are loaded first (checkpoint.State.Restore)
		return nil
	}
	if params == nil || buffers == nil || len(params.F32) != len(s.e.params) || len(buffers.F32) != len(s.e.buffers) {
		return fmt.Errorf("trainer: checkpoint's weight average (train.ema.*) does not fit the model (%d parameters, %d buffer values)",
			len(s.e.params), len(s.e.buffers))
	}
	copy(s.e.params, params.F32)
	copy(s.e.buffers, buffers.F32)
	return nil
}

// emaEngine is an engine that can keep -model-ema's average (the replicated one).
type emaEngine interface {
	modelEMA() *modelEMA
}
