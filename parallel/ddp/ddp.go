package ddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorgonia-parallel/gp/internal/bucketcut"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/replica"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// ErrModelMismatch is wrapped by New's error when the ranks' models differ in parameter or
// buffer names, shapes, dtypes or order.
var ErrModelMismatch = replica.ErrModelMismatch

// ErrDiverged is wrapped by a Run's error when the periodic check (CheckEvery) finds that the
// replicas' parameters or buffers differ.
var ErrDiverged = replica.ErrDiverged

// ErrUnusedParameters is wrapped by the error of a step in which parameters got no gradient
// and neither FindUnusedParameters nor StaticGraph was given.
var ErrUnusedParameters = errors.New("ddp: parameters received no gradient")

// DDP wraps one rank's model replica and the process group that connects the replicas.
// It is driven from one goroutine (the training loop); Program.Run and Join block.
type DDP struct {
	// Model is the wrapped model; its parameters, gradients and buffers are this rank's
	// replica.
	Model *nn.Model

	g          comm.Group
	cfg        config
	rank, size int
	flat       []*nn.Param // parameters in buffer order
	flatPos    []int       // by Param.Index: position in flat
	buckets    []*Bucket
	byParam    []int // by Param.Index: bucket index
	tl         *timeline.Timeline
	steps      int // synchronised steps completed (shadowed ones included)
	rebuilt    bool
	noSync     bool
	static     []bool // by Param.Index: unused in the first step (StaticGraph)
	staticSeen bool
	st         stepState
	join       *joinState
	prescale   bool // the default hook: markReady divides each gradient, launch all-reduces
	be         Backend

	bcast   replica.Broadcaster
	checker replica.Checker
	name    string // "ddp: rank R", the prefix of errors from shared mechanisms
}

// New wraps model for the process group g: it checks that every rank's model has the same
// parameters and buffers (names, shapes, dtypes, order), failing with an error that names
// each differing rank and parameter, then broadcasts rank 0's parameters and buffers to
// every rank, lays out the gradient buckets and opens the backend: host memory reduced over
// g, or WithBackend's (a CUDA device reduced by NCCL: cuda/devddp), which New accepts then,
// failing with the backend's refusal of an option or of the model. Every rank calls New
// with the same options. The optimizer is given to Compile (nn.WithOptimizer), on every
// backend.
func New(ctx context.Context, model *nn.Model, g comm.Group, opts ...Option) (*DDP, error) {
	if model == nil || model.Params == nil {
		return nil, fmt.Errorf("ddp: rank %d: nil model", g.Rank())
	}
	cfg := newConfig(opts)
	if err := cfg.forNew(); err != nil {
		return nil, err
	}
	d := newReducer(model, g, cfg, fmt.Sprintf("ddp: rank %d", g.Rank()))
	if err := replica.CheckModels(ctx, g, model.Params); err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	if err := replica.Broadcast(ctx, g, model.Params, d.who()); err != nil {
		return nil, err
	}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

// newReducer makes the DDP of model over g with its buckets laid out (bucketcut.BySize), before any
// check, broadcast or backend (open): what New completes, and what a Solver drives over its
// learnables' float32 gradients. name prefixes errors.
func newReducer(model *nn.Model, g comm.Group, cfg config, name string) *DDP {
	d := &DDP{Model: model, g: g, cfg: cfg, rank: g.Rank(), size: g.Size(), name: name}
	d.tl = timeline.New(d.rank, cfg.timelineSteps)
	d.prescale = plainAllReduce(cfg.hook)
	d.checker.Every = cfg.checkEvery
	ps := model.Params
	d.flat = flatOrder(ps)
	d.flatPos = make([]int, len(ps.Params))
	for i, p := range d.flat {
		d.flatPos[p.Index] = i
	}
	d.buckets, d.byParam = layout(d.flat, ps.Grad, bucketcut.BySize(gradBytes(d.flat), cfg.firstBucket, cfg.bucketCap, cfg.lastBucket))
	return d
}

// open makes the backend of d: WithBackend's, accepted now that the ranks hold rank 0's
// parameters, or the host's; and gives it the buckets.
func (d *DDP) open() error {
	b := Backend(&hostBackend{d: d})
	if d.cfg.backendSet {
		b = d.cfg.backend
		if b == nil {
			return fmt.Errorf("%s: ddp.WithBackend(nil): give it a backend (cuda/devddp.NewBackend), or leave the option out for host memory", d.who())
		}
		if err := b.Accept(d.Model, Settings{Hook: d.cfg.hook, SyncBN: d.cfg.syncBN, Group: d.g}); err != nil {
			return fmt.Errorf("%s: ddp.WithBackend(%T): %w", d.who(), b, err)
		}
	}
	if err := b.Layout(d.buckets); err != nil {
		return fmt.Errorf("%s: %T: bucket layout: %w", d.who(), b, err)
	}
	d.be = b
	return nil
}

// Backend is the backend the DDP runs on: WithBackend's, or the host's.
func (d *DDP) Backend() Backend { return d.be }

// Rank is this replica's rank.
func (d *DDP) Rank() int { return d.rank }

// Size is the world size.
func (d *DDP) Size() int { return d.size }

// Group is the process group.
func (d *DDP) Group() comm.Group { return d.g }

// Buckets returns the current buckets in launch order. They change once, after the first
// synchronised step (see NoBucketRebuild).
func (d *DDP) Buckets() []*Bucket { return d.buckets }

// Timeline returns this rank's timeline: each step's forward, backward, gradient arrivals,
// bucket reductions, wait and optimizer events, of the last TimelineSteps steps.
func (d *DDP) Timeline() *timeline.Timeline { return d.tl }

// NoSync runs fn with gradient synchronisation off, as PyTorch's no_sync(): the programs
// run inside fn accumulate gradients locally, and the next synchronised step reduces the
// accumulated gradients. Buffers are still broadcast and SyncBatchNorm still reduces.
func (d *DDP) NoSync(fn func() error) error {
	prev := d.noSync
	d.noSync = true
	defer func() { d.noSync = prev }()
	return fn()
}

// broadcastBuffers copies root's buffers to every rank.
func (d *DDP) broadcastBuffers(ctx context.Context, root int) error {
	if len(d.Model.Params.Buffers) == 0 {
		return nil
	}
	start := time.Now()
	if err := d.bcast.Buffers(ctx, d.g, d.Model.Params.Buffers, root, d.who()); err != nil {
		return err
	}
	d.tl.Add(timeline.Event{Name: timeline.EvBuffers, Step: d.steps, Bucket: -1, Start: start, End: time.Now()})
	return nil
}

// checkAgreement checks, every CheckEvery-th synchronised step, that every rank holds the
// same parameters (and the same buffers where they are broadcast or synchronised).
func (d *DDP) checkAgreement(ctx context.Context) error {
	if !d.checker.Due() {
		return nil
	}
	if err := d.be.ReadParams(ctx); err != nil {
		return fmt.Errorf("%s: agreement check: %w", d.who(), err)
	}
	ps := d.Model.Params
	ts := replica.Replicated(ps, true, d.cfg.broadcastBuffers || d.cfg.syncBN)
	return d.checker.Check(ctx, d.g, ts, d.steps, d.who())
}

// who prefixes the errors of the shared mechanisms; made once, as the buffer broadcast
// passes it at every step.
func (d *DDP) who() string { return d.name }
