package trainer

import (
	"context"
	"fmt"
	"path/filepath"
)

// Trainer trains classification models: configured once by its options (New), it trains
// a Model on a Source with Fit, or evaluates one with Validate. A Trainer holds no state
// between calls: each call joins (or is given) its process group, builds the model,
// restores the checkpoint WithResume names and writes into the run directory.
type Trainer struct {
	s settings
}

// New makes a Trainer of opts over the defaults (see the package documentation). It
// checks the options against each other and opens the device WithDevice names, so that a
// misconfiguration fails here, before any process group or data is touched.
func New(opts ...Option) (*Trainer, error) {
	s := defaults()
	for _, o := range opts {
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &Trainer{s: s}, nil
}

// check checks what no single option can: the combinations.
func (s *settings) check() error {
	if err := s.checkSolver(); err != nil {
		return err
	}
	if s.MinLR > s.LR {
		return fmt.Errorf("trainer: schedule MinLR %g is above the learning rate %g", s.MinLR, s.LR)
	}
	if err := s.openDevice(); err != nil {
		return err
	}
	strat, _ := strategyOf(s.Strategy)
	if s.ModelEMA && strat.sharded {
		return fmt.Errorf("trainer: an average of the weights (WithEMA) needs a replicated strategy (ddp, dp or none): under zero3 no rank holds the whole model")
	}
	return s.CommHook.check(s.Strategy)
}

// Fit trains m on src: from the checkpoint WithResume names (by default the newest of the
// run directory that loads) to the last epoch (WithEpochs) or step (WithMaxSteps),
// validating and checkpointing after each epoch, and returns the run's figures. On rank 0
// it writes progress and the summary to WithOutput's writer and DIR/metrics.jsonl, the
// TensorBoard events and DIR/curves.png beside the checkpoints; a side output that fails is
// a warning, never the end of the run.
//
// Fit joins the process group the torchrun environment describes (one process without
// one) unless WithGroup gives one. When it fails on this rank alone (a bad sample, a full
// disk, a callback's error) it aborts the group it joined with its error (comm.Abort), so
// that the other ranks fail at once naming this rank instead of waiting for it.
func (t *Trainer) Fit(ctx context.Context, m Model, src Source) (*Result, error) {
	return t.start(ctx, m, src, false)
}

// Validate evaluates m on src's validation split (top-1, top-5 and the loss, over all
// ranks) with the weights of the checkpoint WithResume names, and trains nothing.
func (t *Trainer) Validate(ctx context.Context, m Model, src Source) (*Result, error) {
	return t.start(ctx, m, src, true)
}

func (t *Trainer) start(ctx context.Context, m Model, src Source, evalOnly bool) (_ *Result, err error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("trainer: no data: use DatasetSource, BatchSource or a Source of your own")
	}
	cfg := t.s
	// A communication hook keeps per-run state: each run builds its own.
	if err := cfg.CommHook.check(cfg.Strategy); err != nil {
		return nil, err
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join("runs", m.name)
	}
	strat, err := strategyOf(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	g := cfg.Group
	if g == nil {
		if g, err = joinGroup(ctx, cfg.commOptions()...); err != nil {
			return nil, err
		}
		defer func() { leaveGroup(g, err) }()
	}
	stopProfile, err := cfg.startCPUProfile(g.Rank())
	if err != nil {
		return nil, err
	}
	defer func() {
		if perr := stopProfile(); err == nil {
			err = perr
		}
	}()
	r, err := newRun(ctx, &cfg, strat, g, m, src)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if evalOnly {
		return r.evaluateOnly(ctx)
	}
	if err := r.openOutputs(); err != nil {
		return nil, err
	}
	defer r.closeOutputs()
	return r.trainAll(ctx)
}
