package nn

import (
	"fmt"
	"math/rand"
	"unsafe"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn/ops"
)

// Initializer fills a freshly allocated parameter or buffer. rng is seeded by the model, so a
// model built twice with the same seed has the same initial values.
type Initializer func(rng *rand.Rand, data []float32)

// Param is one named, learnable float32 tensor. Data and Grad are views into the flat
// buffers of the ParamSet that owns the parameter, so writing Data[i] changes the model and
// the next run of any graph built from it sees the change.
type Param struct {
	// Name is the dotted torchvision name, e.g. "layer1.0.conv1.weight".
	Name string
	// Shape is the tensor shape, e.g. [out,in,kh,kw] for a convolution weight.
	Shape []int
	// Data holds the values (a view into ParamSet.Data).
	Data []float32
	// Grad holds the gradient after a backward pass (a view into ParamSet.Grad).
	Grad []float32
	// Offset is the index of Data[0] in ParamSet.Data.
	Offset int
	// Index is the registration index (the order of ParamSet.Params and of state dicts).
	Index int
	// NoWeightDecay marks biases and normalisation weights that recipes exclude from decay.
	NoWeightDecay bool
	// Init, when set, fills Data at construction.
	Init Initializer
}

// Numel is the number of elements of the parameter.
func (p *Param) Numel() int { return len(p.Data) }

// Buffer is a named, non-learnable tensor that is part of the model's state, such as
// BatchNorm's running_mean, running_var (float32, in Data) and num_batches_tracked (int64, in
// Int64). Exactly one of Data and Int64 is non-nil.
type Buffer struct {
	Name  string
	Shape []int
	Data  []float32
	Int64 []int64
	Init  Initializer
	// Frozen marks a constant of a plain gorgonia graph (Builder.Constant): nothing changes
	// it, so every replica holds it alike, whether buffers are broadcast or not.
	Frozen bool
}

// Numel is the number of elements of the buffer.
func (b *Buffer) Numel() int {
	if b.Int64 != nil {
		return len(b.Int64)
	}
	return len(b.Data)
}

// ParamSet owns the parameters and buffers of a model.
//
// Parameters are laid out in two flat contiguous float32 buffers, Data and Grad, in reverse
// registration order: the last registered parameter (usually the classifier) comes first.
// That is roughly the order in which backward produces gradients, which is the order DDP
// buckets and ZeRO shards want. Params lists the parameters in registration order, which is
// the order of torchvision's state_dict.
type ParamSet struct {
	Params  []*Param
	Buffers []*Buffer
	Data    []float32
	Grad    []float32

	byName map[string]*Param
	bufs   map[string]*Buffer
}

// NewParamSet allocates flat buffers for params (given in registration order) and points
// each parameter's Data and Grad into them. Parameters with an Init are initialised with
// rng (in registration order); buffers are allocated separately and initialised likewise.
func NewParamSet(rng *rand.Rand, params []*Param, buffers []*Buffer) (*ParamSet, error) {
	ps := &ParamSet{byName: map[string]*Param{}, bufs: map[string]*Buffer{}}
	total := 0
	for i, p := range params {
		if p.Name == "" {
			return nil, fmt.Errorf("nn: parameter %d has no name", i)
		}
		if _, dup := ps.byName[p.Name]; dup {
			return nil, fmt.Errorf("nn: parameter %q registered twice", p.Name)
		}
		n, err := numel(p.Shape)
		if err != nil {
			return nil, fmt.Errorf("nn: parameter %q: %w", p.Name, err)
		}
		p.Index = i
		ps.byName[p.Name] = p
		total += n
	}
	ps.Data = make([]float32, total)
	ps.Grad = make([]float32, total)
	off := 0
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		n, _ := numel(p.Shape)
		p.Offset = off
		p.Data = ps.Data[off : off+n : off+n]
		p.Grad = ps.Grad[off : off+n : off+n]
		off += n
	}
	ps.Params = params
	for _, p := range params {
		if p.Init != nil && rng != nil {
			p.Init(rng, p.Data)
		}
	}
	for _, b := range buffers {
		if _, dup := ps.bufs[b.Name]; dup {
			return nil, fmt.Errorf("nn: buffer %q registered twice", b.Name)
		}
		if _, dup := ps.byName[b.Name]; dup {
			return nil, fmt.Errorf("nn: buffer %q has the name of a parameter", b.Name)
		}
		n, err := numel(b.Shape)
		if err != nil {
			return nil, fmt.Errorf("nn: buffer %q: %w", b.Name, err)
		}
		if b.Int64 == nil && b.Data == nil {
			b.Data = make([]float32, n)
		}
		if b.Init != nil && b.Data != nil && rng != nil {
			b.Init(rng, b.Data)
		}
		ps.bufs[b.Name] = b
	}
	ps.Buffers = buffers
	return ps, nil
}

// Param returns the parameter with the given name, or nil.
func (ps *ParamSet) Param(name string) *Param { return ps.byName[name] }

// Buffer returns the buffer with the given name, or nil.
func (ps *ParamSet) Buffer(name string) *Buffer { return ps.bufs[name] }

// NumParams is the total number of parameter elements (Ψ in the ZeRO paper).
func (ps *ParamSet) NumParams() int { return len(ps.Data) }

// useGrad moves the gradients into buf (same length) and points every parameter's Grad
// into it.
func (ps *ParamSet) useGrad(buf []float32) {
	copy(buf, ps.Grad)
	ps.Grad = buf
	for _, p := range ps.Params {
		n := len(p.Grad)
		p.Grad = buf[p.Offset : p.Offset+n : p.Offset+n]
	}
}

// ZeroGrad sets every gradient to zero, split across ops.Threads() goroutines (as
// PyTorch's zero_grad fills in parallel): one pass over resnet18's 11.7M gradients is 2% of
// a training step.
func (ps *ParamSet) ZeroGrad() { zeroFloats(ps.Grad) }

// zeroFloats sets buf to zero, split across ops.Threads() goroutines (splitChunks), each
// chunk of 1 MiB up written with stores that bypass the cache: a gradient buffer is read
// again only when backward next adds into it, long after the cache has moved on. Go's clear
// does so itself from 32 MiB up, and below that reads every line before writing it (a
// 23 MiB chunk, resnet18's half at two threads: 1.2 ms against 2.0 ms).
func zeroFloats(buf []float32) {
	splitChunks(len(buf), func(lo, hi int) {
		d := buf[lo:hi]
		if len(d) < ntClearMin || len(d) >= ntClearMax {
			clear(d)
			return
		}
		for len(d) > 0 {
			n := min(len(d), len(zeroBlock))
			simd.CopyNT(f32Bytes(d[:n]), f32Bytes(zeroBlock[:n]))
			d = d[n:]
		}
	})
}

// ntClearMin and ntClearMax bound the chunks zeroFloats writes past the cache (1 to 32 MiB
// of float32); zeroBlock is the zeros it copies from (64 KiB, read from the L2 cache).
const (
	ntClearMin = 1 << 18
	ntClearMax = 1 << 23
)

var zeroBlock [1 << 14]float32

// splitGrain is the fewest elements worth a goroutine in splitChunks (a memory-bound pass
// over 1M floats takes about 100 µs, a goroutine's start-up about 1 µs).
const splitGrain = 1 << 20

// splitChunks runs f over [0, n) in up to ops.Threads() contiguous chunks of at least
// splitGrain elements, the first on the calling goroutine.
func splitChunks(n int, f func(lo, hi int)) {
	w := min(ops.Threads(), n/splitGrain)
	if w <= 1 {
		f(0, n)
		return
	}
	ops.ForkJoin(w, func(i int) { f(i*n/w, (i+1)*n/w) })
}

func numel(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		n *= d
	}
	return n, nil
}

// f32Bytes is the memory of s as bytes (no copy).
func f32Bytes(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
