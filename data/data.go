// Package data is the input pipeline: map-style datasets (ImageFolder, .npy arrays), torch's
// DistributedSampler, and a Loader whose worker goroutines fill reused NCHW float32 batches.
package data

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math/rand/v2"

	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
)

// Errors callers branch on with errors.Is.
var (
	// ErrCorrupt marks a sample whose file is not a decodable image (or array): zero bytes,
	// truncated, corrupt, or another kind of file.
	ErrCorrupt = rgb.ErrCorrupt
	// ErrNoClasses is returned by NewImageFolder for a root without class folders.
	ErrNoClasses = errors.New("no class folders")
	// ErrBadSample is wrapped by every per-sample failure the loader reports, with the path.
	ErrBadSample = errors.New("bad sample")
	// ErrBadLabel is wrapped by the error of a data set whose labels fall outside
	// [0, classes) (see WithClasses): negative, or too large for the model.
	ErrBadLabel = errors.New("label out of range")
)

// Dataset is a map-style dataset of fixed-shape float32 samples.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Shape is the channels, height and width of every sample.
	Shape() (c, h, w int)
	// Load writes sample i as CHW float32 into dst (len c*h*w) and returns its label. rng is the
	// sample's own generator (seeded by seed, epoch and i), so augmentation does not depend on
	// which goroutine calls Load. Load is called concurrently. Errors name the sample's file.
	Load(ctx context.Context, i int, rng *rand.Rand, dst []float32) (label int64, err error)
}

// BadInput is what a dataset or loader does with a sample it cannot read.
type BadInput int

const (
	// Fail stops with an error naming the file (the default, as torchvision raises).
	Fail BadInput = iota
	// Skip leaves the sample out and logs its path. Samples found bad when a data set opens
	// (labels out of range, see WithClasses) are left out of the data set itself, so Len
	// shrinks by the same samples on every rank and batches stay aligned; samples found bad
	// while loading (an undecodable file) are left out of their batch (Batch.N shrinks;
	// labels stay with their images) and counted in Stats.
	Skip
	// SkipBadLabels is Skip for what is found when a data set opens, the same on every rank
	// (labels out of range, unreadable folders), and Fail for what one rank finds while
	// loading (a file that does not decode), which Skip would leave out of that rank's batch
	// only. Distributed training that needs equal batches on every rank uses it.
	SkipBadLabels
)

// Option configures NewImageFolder, NewArrayDataset and NewLoader; each uses the fields it
// needs and ignores the others.
type Option func(*config)

type config struct {
	transform  *transforms.Pipeline
	fsys       fs.FS
	bad        BadInput
	log        *slog.Logger
	batch      int
	workers    int
	prefetch   int
	sampler    Sampler
	shuffle    bool
	seed       uint64
	dropLast   bool
	extensions []string
	classes    int
}

func newConfig(opts []Option) config {
	c := config{batch: 1, workers: 1, log: slog.Default()}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithTransform sets an image dataset's pipeline (default transforms.Eval(256, 224)).
func WithTransform(p *transforms.Pipeline) Option { return func(c *config) { c.transform = p } }

// WithFS reads an ImageFolder from fsys instead of the operating system (root is then a path in fsys).
func WithFS(fsys fs.FS) Option { return func(c *config) { c.fsys = fsys } }

// WithBadInput sets the bad-input policy (default Fail).
func WithBadInput(b BadInput) Option { return func(c *config) { c.bad = b } }

// WithLogger sets where skipped files are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithBatchSize sets the loader's batch size (default 1).
func WithBatchSize(n int) Option { return func(c *config) { c.batch = n } }

// WithWorkers sets how many goroutines decode and transform (default 1).
func WithWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithPrefetch sets how many batches may be ready or in progress ahead of the consumer
// (default 2 per worker). Memory is (prefetch+1) batches.
func WithPrefetch(n int) Option { return func(c *config) { c.prefetch = n } }

// WithSampler sets the order of indices per epoch, e.g. a DistributedSampler.
func WithSampler(s Sampler) Option { return func(c *config) { c.sampler = s } }

// WithShuffle reshuffles every epoch when no sampler is given (torch's shuffle=True).
func WithShuffle(on bool) Option { return func(c *config) { c.shuffle = on } }

// WithSeed seeds shuffling and per-sample augmentation.
func WithSeed(s uint64) Option { return func(c *config) { c.seed = s } }

// WithDropLast drops a last incomplete batch (torch's drop_last).
func WithDropLast(on bool) Option { return func(c *config) { c.dropLast = on } }

// WithClasses sets the number of classes the labels of a data set must fit: opening an
// ArrayDataset or ImageFolder checks every label against [0, n) (default 0: only negative
// labels are refused). A label outside it fails with an error naming the file, the sample's
// index and the value and wrapping ErrBadLabel, or, under Skip, leaves the sample out of the
// data set (logged with the file, counted by Skipped).
func WithClasses(n int) Option { return func(c *config) { c.classes = n } }

// WithExtensions replaces ImageFolder's accepted file extensions (lower case, with the dot).
func WithExtensions(ext ...string) Option { return func(c *config) { c.extensions = ext } }

// SampleSeed derives the generator for sample index in epoch, independent of workers.
func SampleSeed(seed uint64, epoch, index int) (uint64, uint64) {
	return splitmix(seed ^ splitmix(uint64(epoch)+0x9e3779b97f4a7c15)), splitmix(uint64(index) ^ 0x5851f42d4c957f2d)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
