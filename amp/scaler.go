package amp

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// ErrNoInfCheck is returned by Step and Update when no gradients were unscaled (and checked
// for inf/NaN) since the last Update, as PyTorch's "No inf checks were recorded".
var ErrNoInfCheck = errors.New("amp: no inf/NaN check was recorded since the last update (call Unscale first)")

// State-dict keys of the scaler. They live under "train." so that checkpoint.LoadModel does
// not take them for model state.
const (
	KeyScale          = "train.grad_scaler.scale"
	KeyGrowthFactor   = "train.grad_scaler.growth_factor"
	KeyBackoffFactor  = "train.grad_scaler.backoff_factor"
	KeyGrowthInterval = "train.grad_scaler.growth_interval"
	KeyGrowthTracker  = "train.grad_scaler._growth_tracker"
)

// GradScaler is PyTorch's dynamic loss scaler (torch.cuda.amp.GradScaler) over a flat
// float32 gradient buffer. Each step: the graph multiplies the loss by the current scale
// (ScaleLoss, built once); backward fills the gradients; Unscale divides them by the scale
// and checks them for inf/NaN in the same pass; Step runs the optimizer unless an inf/NaN was
// found; Update backs the scale off after an inf/NaN and grows it after GrowthInterval clean
// steps in a row. Gradient clipping goes between Unscale and Step.
//
// With a process group (NewShardedScaler) the inf/NaN flag is all-reduced with Max before it
// is used, so that every rank skips the same steps and keeps the same scale: DDP ranks that
// each hold all gradients, or ZeRO-3 ranks that each hold a shard of them.
//
// A GradScaler is used by one goroutine; the graphs reading its scale must not run during
// Update.
type GradScaler struct {
	cfg     config
	scale   float32
	tracker int64

	checked  bool // Unscale ran since the last Update
	localInf bool // this rank's gradients held an inf/NaN
	synced   bool // foundInf is the group's verdict
	foundInf bool
	stepped  bool
}

// Option configures a GradScaler.
type Option func(*config)

type config struct {
	initScale, growth, backoff float64
	interval                   int
	disabled                   bool
	group                      comm.Group
	grads                      []float32
}

// WithInitScale sets the initial scale (PyTorch default 65536 = 2^16).
func WithInitScale(s float64) Option { return func(c *config) { c.initScale = s } }

// WithGrowthFactor sets the factor the scale grows by after GrowthInterval clean steps
// (default 2).
func WithGrowthFactor(f float64) Option { return func(c *config) { c.growth = f } }

// WithBackoffFactor sets the factor the scale shrinks by after a step with inf/NaN gradients
// (default 0.5).
func WithBackoffFactor(f float64) Option { return func(c *config) { c.backoff = f } }

// WithGrowthInterval sets the number of consecutive clean steps before the scale grows
// (default 2000).
func WithGrowthInterval(n int) Option { return func(c *config) { c.interval = n } }

// WithEnabled(false) makes the scaler a no-op, as PyTorch's enabled=False: the scale is 1,
// Unscale only checks, Step always steps, Update does nothing.
func WithEnabled(on bool) Option { return func(c *config) { c.disabled = !on } }

// WithGradBuffer names the flat gradient buffer, so that Step unscales it itself when Unscale
// was not called (PyTorch's step calls unscale_ the same way).
func WithGradBuffer(grads []float32) Option { return func(c *config) { c.grads = grads } }

// WithGroup all-reduces the inf/NaN flag over g (Max) before Step and Update use it.
func WithGroup(g comm.Group) Option { return func(c *config) { c.group = g } }

// NewGradScaler returns a scaler with PyTorch's defaults unless options say otherwise.
func NewGradScaler(opts ...Option) (*GradScaler, error) {
	c := config{initScale: 65536, growth: 2, backoff: 0.5, interval: 2000}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case !(c.initScale > 0) || math.IsInf(c.initScale, 0) || c.initScale > math.MaxFloat32:
		return nil, fmt.Errorf("amp: grad scaler: initial scale %g, want a positive finite float32", c.initScale)
	case !(c.growth > 1) || math.IsInf(c.growth, 0):
		return nil, fmt.Errorf("amp: grad scaler: growth factor %g, want > 1", c.growth)
	case !(c.backoff > 0 && c.backoff < 1):
		return nil, fmt.Errorf("amp: grad scaler: backoff factor %g, want in (0, 1)", c.backoff)
	case c.interval < 1:
		return nil, fmt.Errorf("amp: grad scaler: growth interval %d, want >= 1", c.interval)
	}
	s := &GradScaler{cfg: c, scale: float32(c.initScale)}
	if c.disabled {
		s.scale = 1
	}
	return s, nil
}

// NewShardedScaler is NewGradScaler with WithGroup(g): every rank of g must call Step (or
// FoundInf) and Update at the same steps, as collectives require.
func NewShardedScaler(g comm.Group, opts ...Option) (*GradScaler, error) {
	if g == nil {
		return nil, fmt.Errorf("amp: sharded grad scaler: nil process group")
	}
	return NewGradScaler(append(opts, WithGroup(g))...)
}

// Scale is the current loss scale.
func (s *GradScaler) Scale() float32 { return s.scale }

// GrowthTracker is the number of consecutive clean steps since the scale last changed.
func (s *GradScaler) GrowthTracker() int64 { return s.tracker }

// Enabled reports whether the scaler scales (see WithEnabled).
func (s *GradScaler) Enabled() bool { return !s.cfg.disabled }

// Unscale multiplies every gradient by 1/scale (computed as PyTorch does: the reciprocal in
// float64, rounded to float32) and reports whether any gradient is inf or NaN, in one pass
// over grads. A rank's flat buffer or its shard may be unscaled in several calls; the flags
// are or-ed until Update. With a process group the result is this rank's alone: Step,
// Update and FoundInf use the group's.
func (s *GradScaler) Unscale(grads []float32) (foundInf bool) {
	foundInf = Unscale(grads, s.scale)
	s.Unscaled(foundInf)
	return foundInf
}

// Unscale is GradScaler.Unscale's arithmetic on its own, for gradients unscaled where the
// scaler is not (a ZeRO-3 shard, a replica's buffer): it multiplies grads in place by
// float32(1/scale) and reports whether any result is inf or NaN. scale must be > 0.
func Unscale(grads []float32, scale float32) (foundInf bool) {
	inv := float32(1 / float64(scale))
	// x-x is 0 for finite x and NaN for ±inf and NaN: summing it flags both without a branch.
	var acc float32
	if inv == 1 {
		for _, g := range grads {
			acc += g - g
		}
	} else {
		for i, g := range grads {
			g *= inv
			grads[i] = g
			acc += g - g
		}
	}
	return acc != 0 || acc != acc
}

// Unscaled tells the scaler that this rank's gradients were unscaled elsewhere (by a device
// kernel, or over a gradient shard the scaler does not hold) and whether an inf or NaN was
// found there, as Unscale does for the gradients it is given: FoundInf, Step and Update then
// act on it. Several calls in one step combine (any inf marks the step).
func (s *GradScaler) Unscaled(foundInf bool) {
	s.localInf = s.localInf || foundInf
	s.checked = true
	s.synced = false
}

// FoundInf returns whether this step's gradients held an inf or NaN: on any rank of the
// group when the scaler has one (one all-reduce per step; later calls reuse it).
func (s *GradScaler) FoundInf(ctx context.Context) (bool, error) {
	if !s.checked {
		return false, ErrNoInfCheck
	}
	if s.synced {
		return s.foundInf, nil
	}
	s.foundInf = s.localInf
	if g := s.cfg.group; g != nil {
		flag := []float32{0}
		if s.localInf {
			flag[0] = 1
		}
		if err := g.AllReduce(comm.F32(flag), comm.Max).Wait(ctx); err != nil {
			return false, fmt.Errorf("amp: grad scaler: all-reduce of the inf/NaN flag (rank %d of %d): %w", g.Rank(), g.Size(), err)
		}
		s.foundInf = flag[0] != 0
	}
	s.synced = true
	return s.foundInf, nil
}

// Step runs opt.Step unless this step's gradients held an inf or NaN (on any rank), and
// reports whether it skipped. Without a prior Unscale it unscales the buffer given by
// WithGradBuffer, or fails with ErrNoInfCheck.
func (s *GradScaler) Step(opt optim.Optimizer) (skipped bool, err error) {
	return s.StepContext(context.Background(), opt)
}

// StepContext is Step with a context for the all-reduce of a sharded scaler.
func (s *GradScaler) StepContext(ctx context.Context, opt optim.Optimizer) (skipped bool, err error) {
	if s.cfg.disabled {
		if err := opt.Step(); err != nil {
			return false, fmt.Errorf("amp: grad scaler: optimizer step: %w", err)
		}
		return false, nil
	}
	if s.stepped {
		return false, fmt.Errorf("amp: grad scaler: Step called twice before Update")
	}
	if !s.checked && s.cfg.grads != nil {
		s.Unscale(s.cfg.grads)
	}
	inf, err := s.FoundInf(ctx)
	if err != nil {
		return false, err
	}
	s.stepped = true
	if inf {
		return true, nil
	}
	if err := opt.Step(); err != nil {
		return false, fmt.Errorf("amp: grad scaler: optimizer step: %w", err)
	}
	return false, nil
}

// Update adjusts the scale for the next step with the semantics of PyTorch's
// _amp_update_scale_: after an inf/NaN the scale is multiplied by the backoff factor and the
// growth tracker reset; otherwise the tracker counts the clean step, and when it reaches the
// growth interval the scale is multiplied by the growth factor (kept only if finite) and
// the tracker reset. Arithmetic is in float32, as the kernel's.
func (s *GradScaler) Update() error { return s.UpdateContext(context.Background()) }

// UpdateContext is Update with a context for the all-reduce of a sharded scaler (needed
// only when neither Step nor FoundInf ran this step).
func (s *GradScaler) UpdateContext(ctx context.Context) error {
	if s.cfg.disabled {
		s.checked, s.localInf, s.synced, s.foundInf, s.stepped = false, false, false, false, false
		return nil
	}
	inf, err := s.FoundInf(ctx)
	if err != nil {
		return err
	}
	s.checked, s.localInf, s.synced, s.foundInf, s.stepped = false, false, false, false, false
	if inf {
		s.scale *= float32(s.cfg.backoff)
		s.tracker = 0
		return nil
	}
	if s.tracker+1 == int64(s.cfg.interval) {
		if next := s.scale * float32(s.cfg.growth); !math.IsInf(float64(next), 0) && next == next {
			s.scale = next
		}
		s.tracker = 0
		return nil
	}
	s.tracker++
	return nil
}

// StateDict returns the scaler's state under the Key* names, as PyTorch's scaler
// state_dict (scale, growth_factor, backoff_factor, growth_interval, _growth_tracker).
func (s *GradScaler) StateDict() []nn.StateEntry {
	return []nn.StateEntry{
		{Name: KeyScale, Shape: []int{}, F32: []float32{s.scale}},
		{Name: KeyGrowthFactor, Shape: []int{}, F64: []float64{s.cfg.growth}},
		{Name: KeyBackoffFactor, Shape: []int{}, F64: []float64{s.cfg.backoff}},
		{Name: KeyGrowthInterval, Shape: []int{}, I64: []int64{int64(s.cfg.interval)}},
		{Name: KeyGrowthTracker, Shape: []int{}, I64: []int64{s.tracker}},
	}
}

// LoadStateDict restores state saved by StateDict from entries (other keys are ignored).
// Every key must be present with one value of its type; the factors and interval must be
// valid.
func (s *GradScaler) LoadStateDict(entries []nn.StateEntry) error {
	idx := map[string]nn.StateEntry{}
	for _, e := range entries {
		idx[e.Name] = e
	}
	get := func(key string, n func(nn.StateEntry) int) (nn.StateEntry, error) {
		e, ok := idx[key]
		if !ok || n(e) != 1 {
			return e, fmt.Errorf("amp: grad scaler state: key %q missing or not one value of the right type", key)
		}
		return e, nil
	}
	f32 := func(e nn.StateEntry) int { return len(e.F32) }
	f64 := func(e nn.StateEntry) int { return len(e.F64) }
	i64 := func(e nn.StateEntry) int { return len(e.I64) }
	sc, err := get(KeyScale, f32)
	if err != nil {
		return err
	}
	gf, err := get(KeyGrowthFactor, f64)
	if err != nil {
		return err
	}
	bf, err := get(KeyBackoffFactor, f64)
	if err != nil {
		return err
	}
	gi, err := get(KeyGrowthInterval, i64)
	if err != nil {
		return err
	}
	gt, err := get(KeyGrowthTracker, i64)
	if err != nil {
		return err
	}
	c := s.cfg
	c.initScale, c.growth, c.backoff, c.interval = float64(sc.F32[0]), gf.F64[0], bf.F64[0], int(gi.I64[0])
	check, err := NewGradScaler(func(dst *config) { *dst = c })
	if err != nil {
		return fmt.Errorf("amp: grad scaler state: %w", err)
	}
	if gt.I64[0] < 0 {
		return fmt.Errorf("amp: grad scaler state: negative growth tracker %d", gt.I64[0])
	}
	s.cfg, s.tracker = check.cfg, gt.I64[0]
	if !s.cfg.disabled {
		s.scale = sc.F32[0]
	}
	return nil
}
