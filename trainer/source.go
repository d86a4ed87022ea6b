package trainer

import (
	"context"
	"fmt"
	"iter"
	"log/slog"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Source is where a Trainer's batches come from: DatasetSource (map-style data sets),
// BatchSource (a batch function) or a type of the caller's.
type Source interface {
	// Open returns this rank's training split and its validation split (nil: no
	// validation). It is called once per Fit, on every rank, after the group is joined; it
	// may run collectives over env.Group (every rank calls it).
	Open(ctx context.Context, env Env) (train, val *Split, err error)
}

// Env is what a Source opens for.
type Env struct {
	Group       comm.Group
	Rank, World int
	// Batch is the batch size per rank: the global batch size over the world size.
	Batch int
	Seed  int64
	// Classes is the number of classes the caller asked for (0: the data's).
	Classes int
	// Log takes warnings (a skipped sample, say), tagged with the rank.
	Log *slog.Logger
}

// Split is one side (training or validation) of the data as one rank sees it.
type Split struct {
	// C, H, W are each image's channels, height and width.
	C, H, W int
	// Classes is the number of classes (labels are in [0, Classes)).
	Classes int
	// Images is the number of images of the whole split, over all ranks.
	Images int
	// Steps is the number of batches per epoch on this rank; every rank must have the same
	// for training.
	Steps int
	// Batches iterates over epoch's batches, leaving out the first skip (a run resumed in
	// the middle of an epoch sees exactly what the interrupted one had not). A training
	// batch holds Env.Batch images; a batch is valid until the next is asked for.
	Batches func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error]
}

// DatasetSource serves map-style data sets. Training goes through Sampler (default: a
// DistributedSampler, shuffled by seed and epoch, padded so that every rank has as many
// samples) in batches of the per-rank size, a last short batch dropped; validation through
// a strided split in which every image comes once over all ranks.
type DatasetSource struct {
	Train, Val data.Dataset // Val nil: no validation
	// Classes is the number of classes (0: Env.Classes, which must then be set).
	Classes int
	// Workers is the number of loader goroutines per rank (0: 2).
	Workers int
	// Sampler, when set, makes rank's sampler of the n training samples (one epoch's
	// indices per call, drawn from seed and epoch: a resumed run must see the same order).
	Sampler func(n, rank, world int, seed uint64) (data.Sampler, error)
}

// Open implements Source.
func (d DatasetSource) Open(ctx context.Context, env Env) (*Split, *Split, error) {
	if d.Train == nil {
		return nil, nil, fmt.Errorf("trainer: DatasetSource without a training set")
	}
	classes := d.Classes
	if classes == 0 {
		classes = env.Classes
	}
	if classes <= 0 {
		return nil, nil, fmt.Errorf("trainer: DatasetSource: the number of classes is unknown: set DatasetSource.Classes")
	}
	workers := d.Workers
	if workers <= 0 {
		workers = 2
	}
	newSampler := d.Sampler
	if newSampler == nil {
		newSampler = func(n, rank, world int, seed uint64) (data.Sampler, error) {
			return data.NewDistributedSampler(n, rank, world, true, seed, false)
		}
	}
	ds, err := newSampler(d.Train.Len(), env.Rank, env.World, uint64(env.Seed))
	if err != nil {
		return nil, nil, fmt.Errorf("trainer: training sampler: %w", err)
	}
	trainS := &skipSampler{inner: ds, epoch: -1}
	trainL, err := data.NewLoader(d.Train, data.WithBatchSize(env.Batch), data.WithWorkers(workers),
		data.WithSampler(trainS), data.WithSeed(uint64(env.Seed)), data.WithDropLast(true))
	if err != nil {
		return nil, nil, err
	}
	train := fromLoader(d.Train, trainL, trainS, env.Batch, classes)
	if d.Val == nil {
		return train, nil, nil
	}
	valS := &skipSampler{inner: strided(d.Val.Len(), env.Rank, env.World), epoch: -1}
	valL, err := data.NewLoader(d.Val, data.WithBatchSize(env.Batch), data.WithWorkers(workers), data.WithSampler(valS))
	if err != nil {
		return nil, nil, err
	}
	return train, fromLoader(d.Val, valL, valS, env.Batch, classes), nil
}

// fromLoader makes a split of a map-style dataset served by a loader whose sampler is s.
func fromLoader(ds data.Dataset, l *data.Loader, s *skipSampler, batch, classes int) *Split {
	c, h, w := ds.Shape()
	return &Split{C: c, H: h, W: w, Classes: classes, Images: ds.Len(), Steps: l.Len(),
		Batches: func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error] {
			s.epoch, s.skip = epoch, skip*batch
			l.SetEpoch(epoch)
			return l.Batches(ctx)
		}}
}

// BatchFunc fills b with the batch at says: b.Images [at.N, C, H, W] and b.Labels
// [at.N], with b.N, b.C, b.H and b.W set. It must give the same batch for the same at, so
// that a resumed run redoes exactly what the interrupted one did. b is the caller's,
// reused from call to call; its slices may be replaced.
type BatchFunc func(ctx context.Context, at BatchAt, b *data.Batch) error

// BatchAt names one rank's batch of a BatchSource.
type BatchAt struct {
	Train       bool // a training batch (else a validation one)
	Epoch       int  // 0-based; -1 for validation batches (the same at every validation)
	Index       int  // the batch's index in its epoch, 0-based
	Rank, World int
	N           int // the batch size per rank
}

// BatchSource serves batches that a function makes.
type BatchSource struct {
	Train BatchFunc
	// Steps is the number of training batches per epoch (on every rank).
	Steps int
	// Val makes validation batches, ValSteps of them per rank (nil: no validation).
	Val      BatchFunc
	ValSteps int
	// Shape is each image's channels, height and width; Classes the number of classes.
	Shape   [3]int
	Classes int
	// Images is the number of training images per epoch over all ranks (0: Steps × the
	// global batch size).
	Images int
}

// Open implements Source.
func (s BatchSource) Open(ctx context.Context, env Env) (*Split, *Split, error) {
	switch {
	case s.Train == nil || s.Steps <= 0:
		return nil, nil, fmt.Errorf("trainer: BatchSource: want a Train function and Steps > 0 (Steps is %d)", s.Steps)
	case s.Shape[0] <= 0 || s.Shape[1] <= 0 || s.Shape[2] <= 0 || s.Classes <= 0:
		return nil, nil, fmt.Errorf("trainer: BatchSource: Shape %v and Classes %d: want them positive", s.Shape, s.Classes)
	case s.Val != nil && s.ValSteps <= 0:
		return nil, nil, fmt.Errorf("trainer: BatchSource: a Val function with ValSteps %d: want ValSteps > 0", s.ValSteps)
	}
	images := s.Images
	if images == 0 {
		images = s.Steps * env.Batch * env.World
	}
	split := func(fn BatchFunc, train bool, steps, images int) *Split {
		return &Split{C: s.Shape[0], H: s.Shape[1], W: s.Shape[2], Classes: s.Classes, Images: images, Steps: steps,
			Batches: funcBatches(fn, train, steps, env)}
	}
	if s.Val == nil {
		return split(s.Train, true, s.Steps, images), nil, nil
	}
	return split(s.Train, true, s.Steps, images), split(s.Val, false, s.ValSteps, s.ValSteps*env.Batch*env.World), nil
}

// funcBatches iterates over the batches fn makes, checking each one's size and shape.
func funcBatches(fn BatchFunc, train bool, steps int, env Env) func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error] {
	b := &data.Batch{}
	return func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error] {
		return func(yield func(*data.Batch, error) bool) {
			for i := skip; i < steps; i++ {
				if err := ctx.Err(); err != nil {
					yield(nil, err)
					return
				}
				if !train {
					epoch = -1
				}
				err := fn(ctx, BatchAt{Train: train, Epoch: epoch, Index: i, Rank: env.Rank, World: env.World, N: env.Batch}, b)
				if err == nil && (len(b.Images) < b.N*b.C*b.H*b.W || len(b.Labels) < b.N) {
					err = fmt.Errorf("holds %d values and %d labels for %d images of %dx%dx%d", len(b.Images), len(b.Labels), b.N, b.C, b.H, b.W)
				}
				if err != nil {
					yield(nil, fmt.Errorf("trainer: rank %d: batch %d of epoch %d: %w", env.Rank, i, epoch, err))
					return
				}
				if !yield(b, nil) {
					return
				}
			}
		}
	}
}

// skipSampler drops the first skip indices of one epoch.
type skipSampler struct {
	inner       data.Sampler
	epoch, skip int
}

func (s *skipSampler) Len() int { return s.inner.Len() }

func (s *skipSampler) Indices(epoch int) []int {
	idx := s.inner.Indices(epoch)
	if epoch == s.epoch && s.skip > 0 {
		return idx[min(s.skip, len(idx)):]
	}
	return idx
}

type stridedSampler []int

func strided(n, rank, world int) stridedSampler {
	var idx []int
	for i := rank; i < n; i += world {
		idx = append(idx, i)
	}
	return idx
}

func (s stridedSampler) Len() int          { return len(s) }
func (s stridedSampler) Indices(int) []int { return s }
