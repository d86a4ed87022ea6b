package checkpoint

import (
	"encoding"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
)

// ErrMismatch is wrapped by LoadModel's error when keys are missing, unexpected (strict) or
// mis-shaped; the nn.LoadReport returned with it names them.
var ErrMismatch = errors.New("checkpoint: state dict does not match the model")

// Reserved key prefixes: entries under them are not model state.
var reserved = []string{"optim.", "sched.", "train.", "rng."}

// IsModelKey reports whether key names model state (a parameter or buffer) rather than
// optimizer, scheduler, trainer or RNG state.
func IsModelKey(key string) bool {
	for _, p := range reserved {
		if strings.HasPrefix(key, p) {
			return false
		}
	}
	return true
}

// LoadOption configures LoadModel.
type LoadOption func(*loadConfig)

type loadConfig struct{ strict bool }

// NonStrict lets LoadModel succeed when keys are missing or unexpected (PyTorch's
// strict=False); they are still reported. Mis-shaped keys are always an error, as in PyTorch.
func NonStrict() LoadOption { return func(c *loadConfig) { c.strict = false } }

// LoadModel copies the model entries of entries (keys for which IsModelKey holds) into the
// parameters and buffers of ps with the same name. Float32 targets accept float32 and
// float64 data; int64 buffers (num_batches_tracked) accept int64. Nothing is copied when it
// returns an error.
func LoadModel(ps *nn.ParamSet, entries []nn.StateEntry, opts ...LoadOption) (nn.LoadReport, error) {
	c := loadConfig{strict: true}
	for _, o := range opts {
		o(&c)
	}
	var rep nn.LoadReport
	have := map[string]bool{}
	var copies []func()
	for _, e := range entries {
		if !IsModelKey(e.Name) {
			continue
		}
		have[e.Name] = true
		var shape []int
		var dst32 []float32
		var dst64 []int64
		if p := ps.Param(e.Name); p != nil {
			shape, dst32 = p.Shape, p.Data
		} else if b := ps.Buffer(e.Name); b != nil {
			shape, dst32, dst64 = b.Shape, b.Data, b.Int64
		} else {
			rep.Unexpected = append(rep.Unexpected, e.Name)
			continue
		}
		if !sameShape(e.Shape, shape) {
			rep.Mismatched = append(rep.Mismatched, fmt.Sprintf("%s: got %v, want %v", e.Name, e.Shape, shape))
			continue
		}
		switch {
		case dst32 != nil && e.F32 != nil && len(e.F32) == len(dst32):
			copies = append(copies, func() { copy(dst32, e.F32) })
		case dst32 != nil && e.F64 != nil && len(e.F64) == len(dst32):
			copies = append(copies, func() {
				for i, v := range e.F64 {
					dst32[i] = float32(v)
				}
			})
		case dst64 != nil && e.I64 != nil && len(e.I64) == len(dst64):
			copies = append(copies, func() { copy(dst64, e.I64) })
		default:
			rep.Mismatched = append(rep.Mismatched, fmt.Sprintf("%s: got %s, want %s", e.Name, dtype(e), want(dst32 != nil)))
		}
	}
	for _, p := range ps.Params {
		if !have[p.Name] {
			rep.Missing = append(rep.Missing, p.Name)
		}
	}
	for _, b := range ps.Buffers {
		if !have[b.Name] {
			rep.Missing = append(rep.Missing, b.Name)
		}
	}
	if len(rep.Mismatched) > 0 || (c.strict && !rep.OK()) {
		return rep, fmt.Errorf("%w: %s", ErrMismatch, rep)
	}
	for _, f := range copies {
		f()
	}
	return rep, nil
}

// sameShape compares shapes, treating a scalar () and a one-element [1] as equal (torch
// saves num_batches_tracked as a scalar).
func sameShape(a, b []int) bool {
	scalar := func(s []int) bool { return len(s) == 0 || (len(s) == 1 && s[0] == 1) }
	return slices.Equal(a, b) || (scalar(a) && scalar(b))
}

func dtype(e nn.StateEntry) string {
	switch {
	case e.F32 != nil:
		return "float32"
	case e.F64 != nil:
		return "float64"
	}
	return "int64"
}

func want(float bool) string {
	if float {
		return "float32"
	}
	return "int64"
}

// Stateful is anything with a state dict: optimizers and schedulers (package optim).
type Stateful interface {
	StateDict() []nn.StateEntry
	LoadStateDict(entries []nn.StateEntry) error
}

// RNG is a random source whose state can be saved, such as math/rand/v2's *PCG and
// *ChaCha8 (math/rand's v1 sources cannot be).
type RNG interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// State is everything a training run resumes from. Nil fields are skipped.
type State struct {
	Model     *nn.ParamSet
	Optimizer Stateful
	Scheduler Stateful
	// Scaler is the mixed-precision loss scaler (package amp), saved under its own keys
	// ("train.grad_scaler.*").
	Scaler Stateful
	// Step and Epoch are saved as "train.step" and "train.epoch".
	Step, Epoch int64
	// RNG sources are saved as "rng.<name>", one int64 per byte of their binary state.
	RNG map[string]RNG
}

// Entries collects the state dict: model state (torchvision keys), then "optim.*",
// "sched.*", "train.*" and "rng.*". Entries alias live memory.
func (s *State) Entries() ([]nn.StateEntry, error) {
	var out []nn.StateEntry
	if s.Model != nil {
		out = append(out, s.Model.ModelState()...)
	}
	if s.Optimizer != nil {
		out = append(out, s.Optimizer.StateDict()...)
	}
	if s.Scheduler != nil {
		out = append(out, s.Scheduler.StateDict()...)
	}
	if s.Scaler != nil {
		out = append(out, s.Scaler.StateDict()...)
	}
	out = append(out,
		nn.StateEntry{Name: "train.step", Shape: []int{}, I64: []int64{s.Step}},
		nn.StateEntry{Name: "train.epoch", Shape: []int{}, I64: []int64{s.Epoch}})
	for _, name := range sortedKeys(s.RNG) {
		b, err := s.RNG[name].MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("checkpoint: rng %q: %w", name, err)
		}
		v := make([]int64, len(b))
		for i, x := range b {
			v[i] = int64(x)
		}
		out = append(out, nn.StateEntry{Name: "rng." + name, Shape: []int{len(v)}, I64: v})
	}
	return out, nil
}

// Restore loads entries into s: the model through LoadModel (with opts), then the optimizer,
// scheduler, step, epoch and RNG sources. Construct the optimizer and scheduler before
// calling it: scheduler constructors change the learning rate, the optimizer state restores it.
func (s *State) Restore(entries []nn.StateEntry, opts ...LoadOption) (nn.LoadReport, error) {
	var rep nn.LoadReport
	if s.Model != nil {
		var err error
		if rep, err = LoadModel(s.Model, entries, opts...); err != nil {
			return rep, err
		}
	}
	if s.Optimizer != nil {
		if err := s.Optimizer.LoadStateDict(entries); err != nil {
			return rep, err
		}
	}
	if s.Scheduler != nil {
		if err := s.Scheduler.LoadStateDict(entries); err != nil {
			return rep, err
		}
	}
	if s.Scaler != nil {
		if err := s.Scaler.LoadStateDict(entries); err != nil {
			return rep, err
		}
	}
	idx := map[string]nn.StateEntry{}
	for _, e := range entries {
		idx[e.Name] = e
	}
	for key, dst := range map[string]*int64{"train.step": &s.Step, "train.epoch": &s.Epoch} {
		if e, ok := idx[key]; ok && len(e.I64) == 1 {
			*dst = e.I64[0]
		}
	}
	for _, name := range sortedKeys(s.RNG) {
		e, ok := idx["rng."+name]
		if !ok || e.I64 == nil {
			return rep, fmt.Errorf("checkpoint: rng %q: key %q missing or not int64", name, "rng."+name)
		}
		b := make([]byte, len(e.I64))
		for i, x := range e.I64 {
			b[i] = byte(x)
		}
		if err := s.RNG[name].UnmarshalBinary(b); err != nil {
			return rep, fmt.Errorf("checkpoint: rng %q: %w", name, err)
		}
	}
	return rep, nil
}

// SaveState saves s to path atomically (see Save).
func SaveState(path string, s *State) error {
	entries, err := s.Entries()
	if err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", path, err)
	}
	return Save(path, entries)
}

// LoadState loads the file at path into s (see State.Restore); errors name the file.
func LoadState(path string, s *State, opts ...LoadOption) (nn.LoadReport, error) {
	entries, err := Load(path)
	if err != nil {
		return nn.LoadReport{}, err
	}
	rep, err := s.Restore(entries, opts...)
	if err != nil {
		return rep, fmt.Errorf("checkpoint: load %s: %w", path, err)
	}
	return rep, nil
}

func sortedKeys(m map[string]RNG) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
