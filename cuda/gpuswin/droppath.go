package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Stochastic depth with the CPU op's counter-based RNG (nn/ops.RNG): each forward run of a
// DropPath takes the next counter value as its stream, and sample i is kept when the uniform
// drawn from (seed, stream, i) is at least p; kept samples are scaled by float32(1/(1-p)).
// The keep decision below is the same arithmetic as nn/ops (SplitMix64's finaliser over the
// seed, the stream and the index), which ops does not export; TestStepVsCPU in cuda/gpucheck
// compares whole training steps with drop paths against the CPU.

// dropScales draws the stochastic-depth scales of a training forward pass, in the CPU's
// order (per block with p > 0: the attention branch's DropPath, then the MLP's), uploads them
// in one copy and advances the model's RNG. Entry 2k and 2k+1 are block k's [batch] scales,
// nil for a block with p = 0.
func (s *Swin) dropScales(t *tape, batch int) ([]*cuda.Tensor, error) {
	out := make([]*cuda.Tensor, 2*len(s.drop))
	st := newDropStreams(s.rng)
	var host []float32
	var slots []int
	for k, p := range s.drop {
		if p == 0 {
			continue
		}
		for j := range 2 {
			v, err := st.next(batch, p)
			if err != nil {
				return nil, fmt.Errorf("gpuswin: block %d stochastic depth: %w", k, err)
			}
			slots = append(slots, 2*k+j)
			host = append(host, v...)
		}
	}
	if len(slots) == 0 {
		return out, nil
	}
	all, err := upload(t, host, []int{len(slots), batch})
	if err != nil {
		return nil, err
	}
	for i, k := range slots {
		out[k] = t.View(all, i*batch, batch)
	}
	if t.Err != nil {
		return nil, t.Err
	}
	st.commit()
	return out, nil
}

// dropStreams hands out the streams of one forward pass and advances the model's RNG.
type dropStreams struct {
	rng           *ops.RNG
	seed, counter uint64
}

func newDropStreams(r *ops.RNG) *dropStreams {
	d := &dropStreams{rng: r}
	if r != nil {
		d.seed, d.counter = r.State()
	}
	return d
}

// next returns the per-sample scales of the next DropPath with probability p over batch
// samples: 0 for a dropped sample, 1/(1-p) for a kept one.
func (d *dropStreams) next(batch int, p float64) ([]float32, error) {
	if !(p >= 0 && p <= 1) {
		return nil, fmt.Errorf("drop-path probability %v, want it in [0,1]", p)
	}
	if d.rng == nil {
		return nil, fmt.Errorf("drop-path probability %v with a nil RNG (nn.Model.RNG)", p)
	}
	out := ops.DropPathScales(d.seed, d.counter, batch, p)
	d.counter++
	return out, nil
}

// commit stores the advanced counter in the model's RNG.
func (d *dropStreams) commit() {
	if d.rng != nil {
		d.rng.SetState(d.seed, d.counter)
	}
}
