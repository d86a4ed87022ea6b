package data

import (
	"fmt"
	"math/rand/v2"
)

// Sampler gives the dataset indices of one epoch, in order.
type Sampler interface {
	// Len is the number of indices per epoch.
	Len() int
	// Indices returns the epoch's indices; the caller must not modify them.
	Indices(epoch int) []int
}

// SequentialSampler yields 0..n-1 every epoch.
type SequentialSampler struct{ idx []int }

// NewSequentialSampler returns the sampler for n samples.
func NewSequentialSampler(n int) *SequentialSampler {
	s := &SequentialSampler{idx: make([]int, n)}
	for i := range s.idx {
		s.idx[i] = i
	}
	return s
}

// Len is n.
func (s *SequentialSampler) Len() int { return len(s.idx) }

// Indices returns 0..n-1.
func (s *SequentialSampler) Indices(int) []int { return s.idx }

// RandomSampler yields a new permutation of 0..n-1 each epoch, seeded by seed and epoch.
type RandomSampler struct {
	n    int
	seed uint64
}

// NewRandomSampler returns the sampler for n samples.
func NewRandomSampler(n int, seed uint64) *RandomSampler { return &RandomSampler{n: n, seed: seed} }

// Len is n.
func (s *RandomSampler) Len() int { return s.n }

// Indices returns the epoch's permutation.
func (s *RandomSampler) Indices(epoch int) []int {
	return rand.New(rand.NewPCG(s.seed, uint64(epoch))).Perm(s.n)
}

// DistributedSampler is torch.utils.data.DistributedSampler: every rank gets NumSamples indices;
// without dropLast the index list is padded to TotalSize by repeating it from the start, with
// dropLast it is truncated to TotalSize; rank r takes positions r, r+world, r+2*world, ...
//
// With shuffle the list is a permutation seeded by seed+epoch, as torch's, but it is Go's PCG
// permutation, not torch.randperm's Mersenne Twister, so the shuffled order differs from torch's;
// the structure (padding, truncation, rank striding, same permutation on every rank) is the same.
type DistributedSampler struct {
	n, rank, world int
	shuffle        bool
	seed           uint64
	dropLast       bool
	// NumSamples is the number of indices each rank gets per epoch.
	NumSamples int
	// TotalSize is NumSamples*world.
	TotalSize int
}

// NewDistributedSampler returns rank's sampler over n samples split across world ranks.
func NewDistributedSampler(n, rank, world int, shuffle bool, seed uint64, dropLast bool) (*DistributedSampler, error) {
	if world <= 0 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("distributed sampler: invalid rank %d for world size %d", rank, world)
	}
	if n < 0 {
		return nil, fmt.Errorf("distributed sampler: negative dataset size %d", n)
	}
	s := &DistributedSampler{n: n, rank: rank, world: world, shuffle: shuffle, seed: seed, dropLast: dropLast}
	if dropLast && n%world != 0 {
		s.NumSamples = ceilDiv(n-world, world)
	} else {
		s.NumSamples = ceilDiv(n, world)
	}
	s.NumSamples = max(s.NumSamples, 0)
	s.TotalSize = s.NumSamples * world
	return s, nil
}

// ceilDiv is Python's math.ceil(a / b) for b > 0, including negative a.
func ceilDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// Len is NumSamples.
func (s *DistributedSampler) Len() int { return s.NumSamples }

// Indices returns this rank's indices for epoch.
func (s *DistributedSampler) Indices(epoch int) []int {
	var idx []int
	if s.shuffle {
		idx = rand.New(rand.NewPCG(s.seed+uint64(epoch), 0x853c49e6748fea9b)).Perm(s.n)
	} else {
		idx = make([]int, s.n)
		for i := range idx {
			idx[i] = i
		}
	}
	if !s.dropLast {
		for pad := s.TotalSize - len(idx); pad > 0 && s.n > 0; {
			k := min(pad, s.n)
			idx = append(idx, idx[:k]...)
			pad -= k
		}
	} else {
		idx = idx[:s.TotalSize]
	}
	out := make([]int, 0, s.NumSamples)
	for i := s.rank; i < s.TotalSize && i < len(idx); i += s.world {
		out = append(out, idx[i])
	}
	return out
}
