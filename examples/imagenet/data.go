package main

import (
	"github.com/gorgonia-parallel/gp/trainer"

	"context"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/data/webdataset"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// openData opens the training and validation sets for this rank, in cfg.DataFormat:
//   - imagefolder: DATA/train and DATA/val, one folder per class (torchvision's ImageFolder);
//   - synthetic: the same, generated once into DATA by rank 0 while the others wait;
//   - npy: DATA/{train,val}_images.npy (uint8 NHWC) and DATA/{train,val}_labels.npy (int64);
//   - webdataset: DATA/train-*.tar and DATA/val-*.tar shards with .jpg/.png and .cls members;
//     DATA/sizes.json, when present, gives each shard's sample count (open_clip's
//     {"train-000000.tar": 1000, ...}, or a wids shard list), and a shorter shard is an error;
//   - fashion-mnist, idx: DATA/train-{images-idx3,labels-idx1}-ubyte[.gz] for training and the
//     whole t10k-* pair for validation (MNIST's names; DATA defaults to Debian's
//     dataset-fashion-mnist folder), with the preset of Note [Fashion-MNIST preset].
//
// Every label is checked against cfg.NumClasses when the data opens (npy without
// -num-classes infers the count, refusing negative labels and a count far beyond the labels
// that occur); cfg.BadInput chooses between an error naming the file, index and value and
// leaving those samples out on every rank alike.
func openData(ctx context.Context, env trainer.Env, cfg *Config) (*trainer.Split, *trainer.Split, error) {
	g, log := env.Group, env.Log
	if cfg.Data == "" && isIDX(cfg.DataFormat) {
		cfg.Data = data.FashionMNISTDir
	}
	if cfg.Data == "" {
		return nil, nil, fmt.Errorf("trainer: -data is required")
	}
	if cfg.DataFormat == "synthetic" {
		var genErr error
		if g.Rank() == 0 {
			genErr = generate(cfg)
		}
		if err := g.Barrier().Wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("trainer: waiting for rank 0 to generate %s: %w", cfg.Data, err)
		}
		if genErr != nil {
			return nil, nil, genErr
		}
	}
	if _, err := os.Stat(cfg.Data); err != nil {
		return nil, nil, fmt.Errorf("trainer: data folder: %w", err)
	}
	trainT, err := trainTransform(cfg) // -preset and the augmentation flags (augment.go)
	if err != nil {
		return nil, nil, err
	}
	valT := evalTransform(cfg)
	var train, val *trainer.Split
	if _, err := badInput(cfg); err != nil {
		return nil, nil, err
	}
	switch cfg.DataFormat {
	case "imagefolder", "synthetic":
		train, val, err = openFolders(env, cfg, trainT, valT, log)
	case "npy":
		train, val, err = openArrays(env, cfg, trainT, valT, log)
	case "webdataset":
		train, val, err = openShards(ctx, g, cfg, trainT, valT, log)
	case "fashion-mnist", "idx":
		train, val, err = openIDX(env, cfg, log)
	default:
		err = fmt.Errorf("trainer: unknown -data-format %q (imagefolder, synthetic, npy, webdataset, fashion-mnist or idx)", cfg.DataFormat)
	}
	if err != nil {
		return nil, nil, err
	}
	if train.Classes != val.Classes {
		return nil, nil, fmt.Errorf("trainer: %s: the training set has %d classes and the validation set %d", cfg.Data, train.Classes, val.Classes)
	}
	return train, val, nil
}

func openFolders(env trainer.Env, cfg *Config, trainT, valT *transforms.Pipeline, log *slog.Logger) (*trainer.Split, *trainer.Split, error) {
	for _, sub := range []string{"train", "val"} {
		if _, err := os.Stat(filepath.Join(cfg.Data, sub)); err != nil {
			return nil, nil, fmt.Errorf("trainer: data folder %s: %w (want %s/train and %s/val with one folder per class)", filepath.Join(cfg.Data, sub), err, cfg.Data, cfg.Data)
		}
	}
	bad, _ := badInput(cfg)
	trainDS, err := data.NewImageFolder(filepath.Join(cfg.Data, "train"), data.WithTransform(trainT), data.WithLogger(log),
		data.WithClasses(cfg.NumClasses), data.WithBadInput(bad))
	if err != nil {
		return nil, nil, err
	}
	valDS, err := data.NewImageFolder(filepath.Join(cfg.Data, "val"), data.WithTransform(valT), data.WithLogger(log),
		data.WithClasses(cfg.NumClasses), data.WithBadInput(bad))
	if err != nil {
		return nil, nil, err
	}
	return mapSplits(env, cfg, trainDS, valDS, len(trainDS.Classes), len(valDS.Classes))
}

func openArrays(env trainer.Env, cfg *Config, trainT, valT *transforms.Pipeline, log *slog.Logger) (*trainer.Split, *trainer.Split, error) {
	bad, _ := badInput(cfg)
	open := func(side string, t *transforms.Pipeline) (*data.ArrayDataset, error) {
		images, labels := filepath.Join(cfg.Data, side+"_images.npy"), filepath.Join(cfg.Data, side+"_labels.npy")
		ds, err := data.NewArrayDataset(images, labels,
			data.NHWC, data.WithTransform(t), data.WithLogger(log), data.WithClasses(cfg.NumClasses), data.WithBadInput(bad))
		if err != nil && !strings.Contains(err.Error(), images) && !strings.Contains(err.Error(), labels) {
			err = fmt.Errorf("trainer: -data-format npy: %s (images [N,H,W,C]): %w", images, err)
		}
		return ds, err
	}
	trainDS, err := open("train", trainT)
	if err != nil {
		return nil, nil, err
	}
	valDS, err := open("val", valT)
	if err != nil {
		return nil, nil, err
	}
	classes := cfg.NumClasses
	if classes == 0 {
		// Labels are >= 0 (checked on opening); a count far beyond the labels that occur is
		// a stray label, not a model of a million classes.
		seen := map[int64]bool{}
		for _, ds := range []*data.ArrayDataset{trainDS, valDS} {
			for _, y := range ds.Labels() {
				seen[y] = true
				classes = max(classes, int(y)+1)
			}
		}
		if classes > max(2*len(seen), len(seen)+1000) {
			return nil, nil, fmt.Errorf("trainer: %s: labels reach %d but only %d distinct values occur: a stray label? pass -num-classes to check them: %w",
				filepath.Join(cfg.Data, "{train,val}_labels.npy"), classes-1, len(seen), data.ErrBadLabel)
		}
	}
	return mapSplits(env, cfg, trainDS, valDS, classes, classes)
}

// mapSplits serves map-style datasets through trainer.DatasetSource (a DistributedSampler for
// training, a strided split for validation).
func mapSplits(env trainer.Env, cfg *Config, trainDS, valDS data.Dataset, trainClasses, valClasses int) (*trainer.Split, *trainer.Split, error) {
	if trainClasses != valClasses {
		return nil, nil, fmt.Errorf("trainer: %s: the training set has %d classes and the validation set %d", cfg.Data, trainClasses, valClasses)
	}
	return trainer.DatasetSource{Train: trainDS, Val: valDS, Classes: trainClasses, Workers: cfg.Workers}.Open(context.Background(), env)
}

// openShards serves WebDataset shards, split across ranks (and workers). Ranks may hold
// different numbers of samples, so an epoch is as many batches as the smallest rank has.
func openShards(ctx context.Context, g comm.Group, cfg *Config, trainT, valT *transforms.Pipeline, log *slog.Logger) (*trainer.Split, *trainer.Split, error) {
	if cfg.NumClasses == 0 {
		return nil, nil, fmt.Errorf("trainer: -data-format webdataset needs -num-classes")
	}
	rank, world := g.Rank(), g.Size()
	local := cfg.Batch / world
	bad, _ := badInput(cfg)
	var index webdataset.ShardIndex
	if p := filepath.Join(cfg.Data, "sizes.json"); fileExists(p) {
		var err error
		if index, err = webdataset.ReadShardIndex(p); err != nil {
			return nil, nil, fmt.Errorf("trainer: %w", err)
		}
	}
	side := func(name string, t *transforms.Pipeline, shuffle int, train bool) (*trainer.Split, error) {
		shards, _ := filepath.Glob(filepath.Join(cfg.Data, name+"-*.tar"))
		sort.Strings(shards)
		if len(shards) == 0 {
			return nil, fmt.Errorf("trainer: no %s shards %s", name, filepath.Join(cfg.Data, name+"-*.tar"))
		}
		if len(shards) < world {
			return nil, fmt.Errorf("trainer: %d %s shards for %d ranks: every rank needs one", len(shards), name, world)
		}
		mine, least, total, err := scanShards(ctx, g, cfg, name, shards, index, bad, log)
		if err != nil {
			return nil, err
		}
		l := &webdataset.Loader{Shards: shards, Rank: rank, World: world, Workers: cfg.Workers, BatchSize: local,
			Shuffle: shuffle, Seed: uint64(cfg.Seed), Pipeline: t, Log: log, Classes: cfg.NumClasses, Bad: bad}
		steps := least / local
		if !train {
			steps = (mine + local - 1) / local // validation: every sample of this rank's shards
		}
		w, h, _ := t.OutSize()
		return &trainer.Split{C: 3, H: h, W: w, Classes: cfg.NumClasses, Images: total, Steps: max(steps, 0),
			Batches: shardBatches(l, train, steps, local)}, nil
	}
	train, err := side("train", trainT, 1000, true)
	if err != nil {
		return nil, nil, err
	}
	val, err := side("val", valT, 0, false)
	if err != nil {
		return nil, nil, err
	}
	return train, val, nil
}

// scanShards has every rank scan its shards of one side (truncation, the index's counts,
// labels) and agree with the others on the outcome before anyone trains: it returns this
// rank's good samples, the fewest any rank has and the total.
func scanShards(ctx context.Context, g comm.Group, cfg *Config, name string, shards []string, index webdataset.ShardIndex,
	bad data.BadInput, log *slog.Logger) (mine, least, total int, err error) {
	rank, world := g.Rank(), g.Size()
	// Every rank scans its shards (truncation, the index's counts, labels) and the ranks
	// agree on the outcome before anyone trains, so a bad shard stops every rank and
	// skipped samples are counted alike.
	mine, scanErr := 0, error(nil)
	for _, sh := range webdataset.Split(shards, rank, world, 0, 1) {
		st, err := webdataset.Scan(ctx, sh, cfg.NumClasses, index.Expected(sh))
		if err == nil && len(st.Bad) > 0 && bad == data.Fail {
			err = fmt.Errorf("%w (%d bad labels in this shard; -bad-input skip leaves them out)", st.Bad[0], len(st.Bad))
		}
		if err != nil {
			scanErr = fmt.Errorf("trainer: rank %d: %w", rank, err)
			break
		}
		for _, e := range st.Bad {
			log.Warn("trainer: skipping sample", "err", e.Error())
		}
		mine += st.Good()
	}
	// The lowest rank that found a bad shard (world: none). The others' errors name it
	// as their cause (a *comm.RemoteError), so that the launcher reports its error, which
	// names the shard, rather than theirs.
	first := []float64{float64(world)}
	if scanErr != nil {
		first[0] = float64(rank)
	}
	if err := g.AllReduce(comm.F64(first), comm.Min).Wait(ctx); err != nil {
		return 0, 0, 0, err
	}
	if scanErr != nil {
		return 0, 0, 0, scanErr
	}
	if r := int(first[0]); r < world {
		return 0, 0, 0, fmt.Errorf("trainer: rank %d: stopping: %w", rank,
			&comm.RemoteError{Rank: r, Msg: "bad " + name + " shard (its error names it)"})
	}
	counts := []float64{float64(mine), float64(mine)}
	if err := g.AllReduce(comm.F64(counts[:1]), comm.Min).Wait(ctx); err != nil {
		return 0, 0, 0, err
	}
	if err := g.AllReduce(comm.F64(counts[1:]), comm.Sum).Wait(ctx); err != nil {
		return 0, 0, 0, err
	}
	return mine, int(counts[0]), int(counts[1]), nil
}

// shardBatches is a split's batches from a WebDataset loader: a training epoch ends after
// steps full batches (a short last batch is dropped), validation takes every batch.
func shardBatches(l *webdataset.Loader, train bool, steps, local int) func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error] {
	return func(ctx context.Context, epoch, skip int) iter.Seq2[*data.Batch, error] {
		return func(yield func(*data.Batch, error) bool) {
			i := 0
			for b, err := range l.Batches(ctx, epoch) {
				if err != nil {
					yield(nil, err)
					return
				}
				if train && i >= steps {
					return
				}
				if train && b.N != local {
					return // a last short batch: the epoch ends, as with drop_last
				}
				i++
				if i <= skip {
					continue
				}
				if !yield(b, nil) {
					return
				}
			}
		}
	}
}

// badInput is cfg.BadInput as a data policy: skip is data.SkipBadLabels, so that only what
// every rank decides alike (labels, when the data opens) is skipped.
func badInput(cfg *Config) (data.BadInput, error) {
	switch cfg.BadInput {
	case "", "fail":
		return data.Fail, nil
	case "skip":
		return data.SkipBadLabels, nil
	}
	return data.Fail, fmt.Errorf("trainer: unknown -bad-input %q (fail or skip)", cfg.BadInput)
}

// isIDX reports whether format reads MNIST-style IDX files (openIDX).
func isIDX(format string) bool { return format == "fashion-mnist" || format == "idx" }

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
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
