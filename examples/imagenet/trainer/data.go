package trainer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// split is one side (train or val) of the data: its dataset, this rank's sampler and loader.
type split struct {
	ds      data.Dataset
	loader  *data.Loader
	sampler *skipSampler
	classes int
}

func (s *split) setEpoch(epoch, skip int) {
	s.sampler.epoch, s.sampler.skip = epoch, skip
	s.loader.SetEpoch(epoch)
}

// openData opens the training and validation sets for this rank. For -data-format
// synthetic, rank 0 generates the set (once: it is cached in -data) while the others wait.
func openData(ctx context.Context, g comm.Group, cfg *Config, log *slog.Logger) (*split, *split, error) {
	if cfg.Data == "" {
		return nil, nil, fmt.Errorf("trainer: -data is required")
	}
	rank, world := g.Rank(), g.Size()
	if cfg.DataFormat == "synthetic" {
		var genErr error
		if rank == 0 {
			genErr = generate(cfg)
		}
		if err := g.Barrier().Wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("trainer: waiting for rank 0 to generate %s: %w", cfg.Data, err)
		}
		if genErr != nil {
			return nil, nil, genErr
		}
	}
	local := cfg.Batch / world
	switch cfg.DataFormat {
	case "imagefolder", "synthetic":
	default:
		return nil, nil, fmt.Errorf("trainer: -data-format %q is not supported (imagefolder or synthetic)", cfg.DataFormat)
	}
	for _, sub := range []string{"train", "val"} {
		if _, err := os.Stat(filepath.Join(cfg.Data, sub)); err != nil {
			return nil, nil, fmt.Errorf("trainer: data folder %s: %w (want %s/train and %s/val with one folder per class)", filepath.Join(cfg.Data, sub), err, cfg.Data, cfg.Data)
		}
	}
	rrc := transforms.NewRandomResizedCrop(cfg.ImageSize)
	if cfg.DataFormat == "synthetic" {
		rrc.Scale = [2]float64{0.35, 1} // the objects of small generated images survive the crop
	}
	trainT, err := transforms.Compose(rrc, transforms.RandomHorizontalFlip{P: 0.5}, transforms.ToTensor{},
		transforms.Normalize{Mean: transforms.ImageNetMean, Std: transforms.ImageNetStd})
	if err != nil {
		return nil, nil, err
	}
	trainDS, err := data.NewImageFolder(filepath.Join(cfg.Data, "train"), data.WithTransform(trainT), data.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	valDS, err := data.NewImageFolder(filepath.Join(cfg.Data, "val"), data.WithTransform(transforms.Eval(cfg.ImageSize*8/7, cfg.ImageSize)), data.WithLogger(log))
	if err != nil {
		return nil, nil, err
	}
	if len(trainDS.Classes) != len(valDS.Classes) {
		return nil, nil, fmt.Errorf("trainer: %s has %d classes and %s has %d", filepath.Join(cfg.Data, "train"), len(trainDS.Classes), filepath.Join(cfg.Data, "val"), len(valDS.Classes))
	}
	ds, err := data.NewDistributedSampler(trainDS.Len(), rank, world, true, uint64(cfg.Seed), false)
	if err != nil {
		return nil, nil, err
	}
	trainS := &skipSampler{inner: ds, epoch: -1}
	trainL, err := data.NewLoader(trainDS, data.WithBatchSize(local), data.WithWorkers(cfg.Workers),
		data.WithSampler(trainS), data.WithSeed(uint64(cfg.Seed)), data.WithDropLast(true))
	if err != nil {
		return nil, nil, err
	}
	// Validation: every image exactly once over all ranks (rank::world, no padding), in
	// batches of up to the local batch size.
	valS := &skipSampler{inner: strided(valDS.Len(), rank, world), epoch: -1}
	valL, err := data.NewLoader(valDS, data.WithBatchSize(local), data.WithWorkers(cfg.Workers), data.WithSampler(valS))
	if err != nil {
		return nil, nil, err
	}
	return &split{ds: trainDS, loader: trainL, sampler: trainS, classes: len(trainDS.Classes)},
		&split{ds: valDS, loader: valL, sampler: valS, classes: len(valDS.Classes)}, nil
}

// generate writes the synthetic set into cfg.Data unless a complete one is there.
func generate(cfg *Config) error {
	done := filepath.Join(cfg.Data, ".complete")
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	s := cfg.Synthetic
	tmp := cfg.Data + ".tmp"
	os.RemoveAll(tmp)
	if err := synth.WriteSplit(tmp, s.Classes, s.TrainPer, s.ValPer, s.Size, uint64(cfg.Seed)+1); err != nil {
		return fmt.Errorf("trainer: generating the synthetic data set in %s: %w", tmp, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte("ok\n"), 0o644); err != nil {
		return err
	}
	os.RemoveAll(cfg.Data)
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(cfg.Data)), 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, cfg.Data); err != nil {
		return fmt.Errorf("trainer: synthetic data set: %w", err)
	}
	return nil
}

// skipSampler drops the first skip indices of one epoch: a run resumed in the middle of an
// epoch sees exactly the batches the interrupted run had not yet seen.
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
