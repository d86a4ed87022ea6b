package webdataset

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// Loader streams batches from tar shards: each worker reads its share of this rank's shards
// (Split), shuffles through its own buffer, decodes the image with the pipeline and the label from
// cls. Batches use data.Batch; as with torch's IterableDataset the order depends on the worker count.
type Loader struct {
	Shards    []string
	Rank      int
	World     int
	Workers   int
	BatchSize int
	Shuffle   int // shuffle buffer size per worker; 0 disables
	Seed      uint64
	Pipeline  *transforms.Pipeline
	// Bad is the policy for a bad sample. Under Skip every bad sample is left out, counted
	// (Skipped) and logged with its shard; under data.SkipBadLabels only the samples whose
	// label is missing or out of range are, and an image that does not decode fails. Those
	// are the samples Scan lists, so a caller that counted Scan's Good samples on every rank
	// before training knows each rank's stream exactly; an undecodable image is found by one
	// rank only, while reading, and would shorten that rank's stream alone.
	Bad data.BadInput
	// Classes, when positive, is the class count labels are checked against (see
	// Sample.ClassLabel); negative labels are always bad.
	Classes int
	Log     *slog.Logger

	skipped atomic.Int64
}

type decoded struct {
	img   *[]float32 // from the loader's pool
	label int64
	err   error
}

// Skipped is the number of samples left out under data.Skip.
func (l *Loader) Skipped() int64 { return l.skipped.Load() }

// Batches iterates over one epoch (epoch reseeds the shuffle buffers and augmentation). All
// goroutines have exited when the loop ends.
func (l *Loader) Batches(ctx context.Context, epoch int) iter.Seq2[*data.Batch, error] {
	return func(yield func(*data.Batch, error) bool) {
		w, h, ok := l.Pipeline.OutSize()
		if !ok || l.BatchSize <= 0 {
			yield(nil, fmt.Errorf("webdataset: need a fixed-size pipeline and a positive batch size"))
			return
		}
		workers := max(l.Workers, 1)
		size := 3 * h * w
		ctx, cancel := context.WithCancel(ctx)
		out := make(chan decoded, 2*l.BatchSize)
		// The pool holds pointers: a slice put in an interface would be copied to the heap.
		pool := sync.Pool{New: func() any { b := make([]float32, size); return &b }}
		var wg sync.WaitGroup
		closed := make(chan struct{})
		defer func() {
			cancel()
			for range out { // unblock nothing: workers select on ctx; drain what is buffered
			}
			<-closed
		}()
		for wk := 0; wk < workers; wk++ {
			shards := Split(l.Shards, l.Rank, l.World, wk, workers)
			wg.Go(func() {
				send := func(d decoded) bool {
					select {
					case out <- d:
						return true
					case <-ctx.Done():
						return false
					}
				}
				sh := NewShuffler(max(l.Shuffle, 1), max(l.Shuffle, 1), l.Seed^uint64(epoch)<<20^uint64(l.Rank*workers+wk))
				var sc transforms.Scratch
				rng := rand.New(rand.NewPCG(l.Seed+uint64(epoch), uint64(l.Rank*workers+wk)))
				emit := func(s Sample) bool {
					buf := pool.Get().(*[]float32)
					label, err := s.ClassLabel(l.Classes)
					skip := l.Bad != data.Fail
					if err == nil {
						err, skip = s.Image(l.Pipeline, rng, &sc, *buf), l.Bad == data.Skip
					}
					if err != nil && !errors.Is(err, context.Canceled) {
						pool.Put(buf)
						if !skip {
							send(decoded{err: fmt.Errorf("webdataset: %w: %w", data.ErrBadSample, err)})
							return false
						}
						l.skipped.Add(1)
						if l.Log != nil {
							l.Log.Warn("webdataset: skipping bad sample", "err", err.Error())
						}
						return true
					}
					return send(decoded{img: buf, label: label})
				}
				for _, shard := range shards {
					err := ReadShard(ctx, shard, func(s Sample) error {
						if l.Shuffle > 0 {
							var ok bool
							if s, ok = sh.Push(s); !ok {
								return nil
							}
						}
						if !emit(s) {
							return context.Canceled
						}
						return nil
					})
					if err != nil {
						if !errors.Is(err, context.Canceled) {
							send(decoded{err: err})
						}
						return
					}
				}
				for _, s := range sh.Drain() {
					if !emit(s) {
						return
					}
				}
			})
		}
		go func() {
			wg.Wait()
			close(out)
			close(closed)
		}()
		b := &data.Batch{C: 3, H: h, W: w, Images: make([]float32, 0, l.BatchSize*size)}
		flush := func() bool {
			if b.N == 0 {
				return true
			}
			ok := yield(b, nil)
			b.N, b.Images, b.Labels = 0, b.Images[:0], b.Labels[:0]
			return ok
		}
		for d := range out {
			if d.err != nil {
				yield(nil, d.err)
				return
			}
			b.Images = append(b.Images, *d.img...)
			b.Labels = append(b.Labels, d.label)
			b.N++
			pool.Put(d.img)
			if b.N == l.BatchSize && !flush() {
				return
			}
		}
		if ctx.Err() == nil {
			flush()
		}
	}
}
