package data

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Batch is one batch in NCHW float32. Its memory is reused: it is valid until the loop asks for
// the next batch.
type Batch struct {
	// Images holds N samples of C×H×W float32, sample-major (NCHW); len is N*C*H*W.
	Images []float32
	// Labels holds the N labels, Labels[k] belonging to sample k of Images.
	Labels []int64
	// Indices holds the dataset index of each sample.
	Indices []int
	// N is the number of samples; below the batch size for a last partial batch or when bad
	// samples were skipped.
	N       int
	C, H, W int

	images []float32 // full-capacity backing memory
}

// Stats are the loader's running totals since it was created.
type Stats struct {
	Images  int64         // samples delivered
	Skipped int64         // bad samples left out (Skip policy)
	Bad     []string      // their errors (path included), the first 100
	Elapsed time.Duration // wall time spent inside Batches loops
}

// ImagesPerSec is Images over Elapsed.
func (s Stats) ImagesPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Images) / s.Elapsed.Seconds()
}

// Loader is torch's DataLoader for a map-style Dataset: worker goroutines fill whole batches in
// reused memory, at most prefetch batches ahead, delivered in sampler order. The order and the
// augmentation of every sample depend only on the seed and the epoch, not on the worker count.
type Loader struct {
	ds      Dataset
	cfg     config
	sampler Sampler
	epoch   atomic.Int64
	bufs    []*Batch

	images, skipped atomic.Int64
	mu              sync.Mutex
	bad             []string
	elapsed         time.Duration
}

// NewLoader returns a loader. Options: WithBatchSize, WithWorkers, WithPrefetch, WithSampler
// (default sequential, or random with WithShuffle), WithSeed, WithDropLast, WithBadInput,
// WithLogger.
func NewLoader(ds Dataset, opts ...Option) (*Loader, error) {
	c := newConfig(opts)
	if c.batch <= 0 || c.workers <= 0 || c.prefetch < 0 {
		return nil, fmt.Errorf("loader: batch size %d, workers %d and prefetch %d must be positive", c.batch, c.workers, c.prefetch)
	}
	if c.prefetch == 0 {
		c.prefetch = 2 * c.workers
	}
	c.prefetch = max(c.prefetch, c.workers)
	l := &Loader{ds: ds, cfg: c, sampler: c.sampler}
	if l.sampler == nil {
		if c.shuffle {
			l.sampler = NewRandomSampler(ds.Len(), c.seed)
		} else {
			l.sampler = NewSequentialSampler(ds.Len())
		}
	}
	return l, nil
}

// SetEpoch selects the epoch the next Batches loop runs: it reshuffles the sampler and changes
// every sample's augmentation, as DistributedSampler.set_epoch.
func (l *Loader) SetEpoch(e int) { l.epoch.Store(int64(e)) }

// Len is the number of batches per epoch.
func (l *Loader) Len() int {
	n := l.sampler.Len()
	if l.cfg.dropLast {
		return n / l.cfg.batch
	}
	return (n + l.cfg.batch - 1) / l.cfg.batch
}

// Stats returns the running totals.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Images: l.images.Load(), Skipped: l.skipped.Load(), Bad: append([]string(nil), l.bad...), Elapsed: l.elapsed}
}

type job struct {
	k int
	b *Batch
}

type result struct {
	k   int
	b   *Batch
	err error
}

// Batches iterates over one epoch. Breaking out of the loop or cancelling ctx stops the workers;
// every goroutine has exited when the loop ends. Only one Batches loop may run at a time.
func (l *Loader) Batches(ctx context.Context) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		start := time.Now()
		defer func() {
			l.mu.Lock()
			l.elapsed += time.Since(start)
			l.mu.Unlock()
		}()
		epoch := int(l.epoch.Load())
		idx := l.sampler.Indices(epoch)
		nb := len(idx) / l.cfg.batch
		if !l.cfg.dropLast && len(idx)%l.cfg.batch != 0 {
			nb++
		}
		nbuf := l.cfg.prefetch + 1
		for len(l.bufs) < nbuf {
			l.bufs = append(l.bufs, l.newBatch())
		}
		ctx, cancel := context.WithCancel(ctx)
		jobs := make(chan job)
		results := make(chan result, nbuf)
		free := make(chan *Batch, nbuf)
		for _, b := range l.bufs[:nbuf] {
			free <- b
		}
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		wg.Go(func() {
			defer close(jobs)
			for k := 0; k < nb; k++ {
				select {
				case b := <-free:
					select {
					case jobs <- job{k, b}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		})
		for range l.cfg.workers {
			wg.Go(func() {
				pcg := rand.NewPCG(0, 0)
				rng := rand.New(pcg)
				for j := range jobs {
					lo := j.k * l.cfg.batch
					err := l.fill(ctx, j.b, idx[lo:min(lo+l.cfg.batch, len(idx))], epoch, pcg, rng)
					select {
					case results <- result{j.k, j.b, err}:
					case <-ctx.Done():
						return
					}
				}
			})
		}
		pending := map[int]result{}
		var held *Batch
		for next := 0; next < nb; {
			r, ok := pending[next]
			if !ok {
				select {
				case r := <-results:
					pending[r.k] = r
				case <-ctx.Done():
					yield(nil, fmt.Errorf("loader: epoch %d batch %d: %w", epoch, next, ctx.Err()))
					return
				}
				continue
			}
			delete(pending, next)
			if held != nil {
				free <- held
			}
			held = r.b
			if r.err != nil {
				yield(nil, r.err)
				return
			}
			l.images.Add(int64(r.b.N))
			if !yield(r.b, nil) {
				return
			}
			next++
		}
	}
}

func (l *Loader) newBatch() *Batch {
	c, h, w := l.ds.Shape()
	b := &Batch{C: c, H: h, W: w, images: make([]float32, l.cfg.batch*c*h*w)}
	b.Labels = make([]int64, 0, l.cfg.batch)
	b.Indices = make([]int, 0, l.cfg.batch)
	return b
}

// fill loads the samples of one batch, compacting over skipped ones.
func (l *Loader) fill(ctx context.Context, b *Batch, idx []int, epoch int, pcg *rand.PCG, rng *rand.Rand) error {
	size := b.C * b.H * b.W
	b.N, b.Labels, b.Indices = 0, b.Labels[:0], b.Indices[:0]
	for _, i := range idx {
		if err := ctx.Err(); err != nil {
			return err
		}
		pcg.Seed(SampleSeed(l.cfg.seed, epoch, i))
		label, err := l.ds.Load(ctx, i, rng, b.images[b.N*size:(b.N+1)*size])
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if l.cfg.bad != Skip {
				return fmt.Errorf("loader: epoch %d sample %d: %w: %w", epoch, i, ErrBadSample, err)
			}
			l.skip(i, err)
			continue
		}
		b.Labels = append(b.Labels, label)
		b.Indices = append(b.Indices, i)
		b.N++
	}
	b.Images = b.images[:b.N*size]
	return nil
}

func (l *Loader) skip(i int, err error) {
	l.skipped.Add(1)
	l.cfg.log.Warn("data: skipping bad sample", slog.Int("index", i), slog.String("err", err.Error()))
	l.mu.Lock()
	if len(l.bad) < 100 {
		l.bad = append(l.bad, err.Error())
	}
	l.mu.Unlock()
}
