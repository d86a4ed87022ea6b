package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorgonia-parallel/gp/data"
)

// Mixup is timm's batch mixing (Mixup with mode "batch"): each batch is mixed with
// probability Prob (0: 1), by mixup with Beta(Mixup, Mixup) or cutmix with Beta(Cutmix,
// Cutmix) (with both, cutmix with probability SwitchProb), each sample with the sample at
// the mirrored position, and the loss takes the soft targets (label smoothing folded in),
// as timm's SoftTargetCrossEntropy. The draws depend only on the seed, the rank and the
// batch's position in the run, so a resumed run mixes as the interrupted one did.
type Mixup struct {
	Mixup, Cutmix    float64
	Prob, SwitchProb float64
}

// on reports whether batches are mixed.
func (m Mixup) on() bool { return m.Mixup > 0 || m.Cutmix > 0 }

// WithMixup mixes the training batches (see Mixup); the zero Mixup is off.
func WithMixup(m Mixup) Option {
	return func(s *settings) error {
		if m.Prob == 0 {
			m.Prob = 1
		}
		switch {
		case m.Mixup < 0 || m.Cutmix < 0:
			return fmt.Errorf("trainer: WithMixup: alphas %g and %g: want them >= 0", m.Mixup, m.Cutmix)
		case !(m.Prob > 0 && m.Prob <= 1) || !(m.SwitchProb >= 0 && m.SwitchProb <= 1):
			return fmt.Errorf("trainer: WithMixup: probabilities %g and %g: want them in [0, 1]", m.Prob, m.SwitchProb)
		}
		s.Mix = m
		return nil
	}
}

// newMixer is the mixer of s's Mixup on rank, nil when it is off.
func newMixer(s *settings, rank int) *mixer {
	if !s.Mix.on() {
		return nil
	}
	return &mixer{a: s.Mix, classes: s.NumClasses, smoothing: s.Smoothing, seed: uint64(s.Seed), rank: rank}
}

// mixer is timm's Mixup (mode "batch"): one λ per batch, each sample mixed with the sample
// at the mirrored position (the batch flipped), soft targets with label smoothing.
type mixer struct {
	a         Mixup
	classes   int
	smoothing float64
	seed      uint64
	rank      int
	targets   []float32
	swap      []float32
}

// mix mixes b's images in place for the microbatch at position pos of the run (a global
// counter: the draw depends only on seed, rank and pos, so that a resumed run mixes as the
// interrupted one did) and returns the soft targets [b.N, classes]; lam is the share of
// each sample's own image (1 when the batch was left unmixed).
func (m *mixer) mix(b *data.Batch, pos int64) (targets []float32, lam float64) {
	rng := rand.New(rand.NewPCG(m.seed^0x6d69787570, uint64(pos)<<16|uint64(m.rank)))
	lam = 1
	cut := false
	if rng.Float64() < m.a.Prob {
		switch {
		case m.a.Mixup > 0 && m.a.Cutmix > 0:
			cut = rng.Float64() < m.a.SwitchProb
		case m.a.Cutmix > 0:
			cut = true
		}
		alpha := m.a.Mixup
		if cut {
			alpha = m.a.Cutmix
		}
		lam = betaSample(rng, alpha)
	}
	n, plane := b.N, b.H*b.W
	img := b.Images[:n*b.C*plane]
	if lam < 1 {
		// The flipped batch, read before any sample is overwritten.
		m.swap = append(m.swap[:0], img...)
		per := b.C * plane
		if cut {
			y0, y1, x0, x1 := cutBox(rng, b.H, b.W, lam)
			lam = 1 - float64((y1-y0)*(x1-x0))/float64(plane) // timm's correct_lam
			for i := range n {
				j := n - 1 - i
				for c := range b.C {
					for y := y0; y < y1; y++ {
						o := i*per + c*plane + y*b.W
						s := j*per + c*plane + y*b.W
						copy(img[o+x0:o+x1], m.swap[s+x0:s+x1])
					}
				}
			}
		} else {
			l := float32(lam)
			for i := range n {
				j := n - 1 - i
				dst, src := img[i*per:(i+1)*per], m.swap[j*per:(j+1)*per]
				for k := range dst {
					dst[k] = l*dst[k] + (1-l)*src[k]
				}
			}
		}
	}
	k := m.classes
	if cap(m.targets) < n*k {
		m.targets = make([]float32, n*k)
	}
	t := m.targets[:n*k]
	off := m.smoothing / float64(k)
	on := 1 - m.smoothing + off
	for i := range n {
		row := t[i*k : (i+1)*k]
		for c := range row {
			row[c] = float32(off)
		}
		row[b.Labels[i]] += float32(lam * (on - off))
		row[b.Labels[n-1-i]] += float32((1 - lam) * (on - off))
	}
	return t, lam
}

// cutBox is timm's rand_bbox: a box of (1-λ) of the area (side ratio sqrt(1-λ)), centred
// uniformly, clipped to the image; it returns rows [y0, y1) and columns [x0, x1).
func cutBox(rng *rand.Rand, h, w int, lam float64) (y0, y1, x0, x1 int) {
	r := math.Sqrt(1 - lam)
	ch, cw := int(float64(h)*r), int(float64(w)*r)
	cy, cx := rng.IntN(h), rng.IntN(w)
	clip := func(v, hi int) int { return min(max(v, 0), hi) }
	return clip(cy-ch/2, h), clip(cy+ch/2, h), clip(cx-cw/2, w), clip(cx+cw/2, w)
}

// betaSample draws from Beta(α, α) as the ratio of two Gamma(α) draws.
func betaSample(rng *rand.Rand, alpha float64) float64 {
	x, y := gammaSample(rng, alpha), gammaSample(rng, alpha)
	if x+y == 0 {
		return 0.5
	}
	return x / (x + y)
}

// gammaSample draws from Gamma(α, 1) by Marsaglia and Tsang's method (α < 1 through
// Gamma(α+1)·U^(1/α)).
func gammaSample(rng *rand.Rand, alpha float64) float64 {
	if alpha < 1 {
		return gammaSample(rng, alpha+1) * math.Pow(rng.Float64(), 1/alpha)
	}
	d := alpha - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}
