package ddp

import (
	"errors"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// Option configures New or NewSolver. Each option's doc says which of the two it applies to;
// the other refuses it, naming it.
type Option func(*config)

type config struct {
	bucketCap        int
	firstBucket      int
	lastBucket       int
	findUnused       bool
	staticGraph      bool
	broadcastBuffers bool
	syncBN           bool
	hook             CommHook
	rebuild          bool
	timelineSteps    int
	checkEvery       int
	backend          Backend // WithBackend's; nil: the host backend
	backendSet       bool    // WithBackend was given (WithBackend(nil) is refused)

	// NewSolver's alone.
	group          comm.Group
	backwardPasses int
	clipNorm       float64
}

func newConfig(opts []Option) config {
	c := config{
		bucketCap:        25 << 20,
		firstBucket:      1 << 20,
		lastBucket:       1 << 20,
		broadcastBuffers: true,
		rebuild:          true,
		hook:             AllReduceHook(),
		timelineSteps:    timeline.DefaultSteps,
		checkEvery:       replica.DefaultCheckEvery,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.bucketCap < 4 {
		c.bucketCap = 4
	}
	if c.firstBucket < 4 {
		c.firstBucket = 4
	}
	if c.hook == nil {
		c.hook = AllReduceHook()
	}
	return c
}

// BucketCapBytes sets the size cap of a gradient bucket (default 25 MiB, PyTorch's
// bucket_cap_mb=25), for New and NewSolver: as in PyTorch, gradients are added to a bucket,
// in buffer order, until it holds at least n bytes (New's first and last buckets are sized
// by FirstBucketBytes and LastBucketBytes; NewSolver's first is cut at n too).
func BucketCapBytes(n int) Option { return func(c *config) { c.bucketCap = n } }

// FirstBucketBytes sets the cap of the first bucket, the one holding the first gradients of
// backward (default 1 MiB, as PyTorch), so that communication starts early.
func FirstBucketBytes(n int) Option { return func(c *config) { c.firstBucket = n } }

// LastBucketBytes sets the size of the last bucket, the one holding the gradients that
// arrive last in backward (default 1 MiB; 0 gives PyTorch's layout, where the last bucket is
// whatever the caps leave over). Its all-reduce cannot overlap backward, since it starts when
// backward ends: with PyTorch's layout that last remainder was 20 MB for resnet18, all of it
// on the critical path, while a small last bucket lets the one before it start during the
// backward of the first layers. The cut falls on the first parameter boundary from the end
// of backward at which at least n bytes are collected and every gradient after the cut
// arrived after every gradient before it (or, failing that, at 2n bytes).
func LastBucketBytes(n int) Option { return func(c *config) { c.lastBucket = n } }

// FindUnusedParameters makes parameters that get no gradient in a step (not used by the
// graph, or not reaching the loss) count as ready with a zero contribution, instead of
// failing the step. Parameters the graph never uses are marked ready before backward starts;
// the others only once the tape has finished, which delays their buckets.
func FindUnusedParameters() Option { return func(c *config) { c.findUnused = true } }

// StaticGraph declares that every step uses the same parameters: the unused ones are
// recorded in the first step and marked ready before backward in every later step, and the
// search for them is skipped (PyTorch's static_graph=True).
func StaticGraph() Option { return func(c *config) { c.staticGraph = true } }

// BroadcastBuffers sets whether rank 0's buffers (BatchNorm running statistics) are
// broadcast to every rank before each training forward (default true, as PyTorch).
func BroadcastBuffers(on bool) Option { return func(c *config) { c.broadcastBuffers = on } }

// SyncBatchNorm makes every BatchNorm of the compiled programs a SyncBatchNorm: batch
// statistics are summed over the group in forward and backward, on any backend (PyTorch's
// is GPU-only).
func SyncBatchNorm() Option { return func(c *config) { c.syncBN = true } }

// WithCommHook replaces the plain all-reduce of each bucket (see CommHook; package commhook
// holds FP16Compress, BF16Compress and PowerSGD), for New and NewSolver (whose float32
// buckets the hook reduces; float64 gradients are all-reduced in float64).
func WithCommHook(h CommHook) Option { return func(c *config) { c.hook = h } }

// NoBucketRebuild keeps the initial buckets instead of rebuilding them once after the first
// step from the order in which gradients arrived.
func NoBucketRebuild() Option { return func(c *config) { c.rebuild = false } }

// TimelineSteps sets how many of the most recent steps the timeline keeps the events of
// (default timeline.DefaultSteps; 0 keeps none, only the summary's running totals; negative
// is 0). The timeline's memory is about 100 bytes per event, ~70 events a step for resnet18.
func TimelineSteps(n int) Option { return func(c *config) { c.timelineSteps = max(n, 0) } }

// CheckEvery sets how often, in synchronised steps, Run checks that every rank still holds
// the same parameters (and buffers, where they are broadcast or synchronised): a hash of each
// tensor is all-gathered, and a difference fails the step on every rank with an error
// (ErrDiverged) naming the first tensor that differs and the ranks. Default
// replica.DefaultCheckEvery; 0 turns the check off. Every rank must use the same value.
func CheckEvery(steps int) Option { return func(c *config) { c.checkEvery = steps } }

// WithBackend makes b the backend of the DDP that New makes (cuda/devddp.NewBackend: a CUDA
// device, reduced by NCCL) instead of host memory over the group; New accepts it as its
// doc says. b stays the caller's, to close after the DDP's last step (or after New failed).
// NewSolver refuses it: a wrapped solver steps host memory.
func WithBackend(b Backend) Option {
	return func(c *config) { c.backend, c.backendSet = b, true }
}

// WithGroup makes NewSolver use g instead of starting a group from the launcher's
// environment; Close then leaves g open. New takes its group as an argument and refuses it.
func WithGroup(g comm.Group) Option { return func(c *config) { c.group = g } }

// BackwardPasses makes NewSolver's Step accumulate k backward passes before it reduces and
// updates (see Solver); New refuses it: run the passes before the last inside NoSync.
func BackwardPasses(k int) Option { return func(c *config) { c.backwardPasses = k } }

// ClipGradNorm makes NewSolver's Step clip the averaged gradients to a global L2 norm of at
// most maxNorm before the inner solver's update; New refuses it: the optimizer given to
// Compile clips (optim.ClipGradNorm).
func ClipGradNorm(maxNorm float64) Option { return func(c *config) { c.clipNorm = maxNorm } }

// forNew refuses NewSolver's options.
func (c config) forNew() error {
	switch {
	case c.group != nil:
		return errors.New("ddp: WithGroup is NewSolver's option: New takes the group as its argument")
	case c.backwardPasses != 0:
		return errors.New("ddp: BackwardPasses is NewSolver's option: with New, accumulate by running all but the last pass inside NoSync")
	case c.clipNorm != 0:
		return errors.New("ddp: ClipGradNorm is NewSolver's option: with New, the optimizer given to Compile clips (optim.ClipGradNorm)")
	}
	return nil
}

// forSolver refuses New's options that have no meaning for a wrapped solver, which averages
// whatever gradients Step is handed after backward has finished.
func (c config) forSolver() error {
	def := newConfig(nil)
	bad := ""
	switch {
	case c.findUnused:
		bad = "FindUnusedParameters (Step averages the gradients it is handed; hand it only the learnables that have one)"
	case c.staticGraph:
		bad = "StaticGraph"
	case c.syncBN:
		bad = "SyncBatchNorm (it needs the build-function path: New and Compile)"
	case c.broadcastBuffers != def.broadcastBuffers:
		bad = "BroadcastBuffers (NewSolver copies rank 0's leaves once; a plain graph has no buffers)"
	case c.firstBucket != def.firstBucket || c.lastBucket != def.lastBucket:
		bad = "FirstBucketBytes or LastBucketBytes (they order reductions within backward; use BucketCapBytes)"
	case c.rebuild != def.rebuild:
		bad = "NoBucketRebuild"
	case c.backendSet:
		bad = "WithBackend (a wrapped solver steps the gradients it is handed in host memory)"
	case c.timelineSteps != def.timelineSteps:
		bad = "TimelineSteps"
	case c.backwardPasses < 0:
		return errors.New("ddp: NewSolver: BackwardPasses must be at least 1")
	case c.clipNorm < 0:
		return errors.New("ddp: NewSolver: ClipGradNorm's maximum norm must be positive")
	}
	if bad != "" {
		return errors.New("ddp: NewSolver: " + bad + " does not apply to a wrapped solver")
	}
	return nil
}
