package zero

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Checkpoint layout: <dir>/<tag>/shard-<r>-of-<N>.npz per rank, <dir>/<tag>/manifest.json
// written by rank 0 once every shard is in place, then <dir>/LATEST naming the tag. Every
// file is written with checkpoint.WriteFile (temporary name, fsync, rename, directory
// fsync), so a save interrupted anywhere (a rank killed) leaves LATEST naming the previous
// complete checkpoint.
const (
	// ManifestName is the manifest's file name inside a checkpoint.
	ManifestName = "manifest.json"
	// LatestName is the file in the checkpoint root that names the newest complete tag.
	LatestName = "LATEST"
	// ManifestFormat identifies the manifest layout.
	ManifestFormat = "gp-zero-checkpoint/1"
)

// Manifest describes a sharded checkpoint.
type Manifest struct {
	Format string `json:"format"`
	Tag    string `json:"tag"`
	// World is the world size that wrote it; Files lists one shard file per rank.
	World int      `json:"world"`
	Files []string `json:"files"`
	// Psi is the number of parameters; Params their names and shapes in registration order.
	Psi    int         `json:"psi"`
	Params []ParamInfo `json:"params"`
	// Steps is the number of optimizer steps taken.
	Steps int64 `json:"steps"`
}

// ParamInfo is one parameter's name and shape.
type ParamInfo struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// saveFault, when set (by tests), runs at each stage of Save on each rank.
var saveFault func(rank int, stage string)

// Shard is one rank's part of a ZeRO-3 checkpoint as it is held in host memory: the group
// (its rank and size, and Save's barriers), the model (parameter names and shapes, and the
// buffers rank 0 saves), the optimizer segments over the rank's master shard (as
// Layout.Segments makes them) and the optimizer over those segments. Engine.Save and
// Engine.Load are its Save and Load over the engine's shard; a backend's shard is one over
// host copies of its state (Backend.Checkpoint), so every backend writes and reads the same
// files.
type Shard struct {
	Group     comm.Group
	Params    *nn.ParamSet
	Segments  []optim.Segment
	Optimizer optim.Optimizer
}

// Save writes this rank's shard (its master parameter slices, named "<param>[lo:hi]" or
// "<param>" when whole, and its optimizer state with optim's sliced keys; rank 0 adds the
// model's buffers) to dir/tag, then rank 0 writes the manifest and points LATEST at tag.
// Every rank calls it; it returns once the checkpoint is complete on every rank. A backend
// writes the same files (its shard copied to host memory first).
func (e *Engine) Save(ctx context.Context, dir, tag string) error {
	if e.closed {
		return ErrClosed
	}
	if e.be != nil {
		s, err := e.be.Checkpoint(ctx, true)
		if err != nil {
			return fmt.Errorf("zero: rank %d: checkpoint %s: %w", e.rank, tag, err)
		}
		return s.Save(ctx, dir, tag)
	}
	err := e.shard().Save(ctx, dir, tag)
	if rerr := e.releaseState(); err == nil && rerr != nil {
		err = fmt.Errorf("zero: rank %d: %w", e.rank, rerr)
	}
	return err
}

func (e *Engine) shard() Shard {
	return Shard{Group: e.g, Params: e.Model.Params, Segments: e.segs, Optimizer: e.opt}
}

// Save writes the shard as Engine.Save describes. Every rank of the group calls it with
// the same dir and tag.
func (s Shard) Save(ctx context.Context, dir, tag string) error {
	rank, world := s.Group.Rank(), s.Group.Size()
	if tag == "" || strings.ContainsAny(tag, "/\\") || tag == "." || tag == ".." {
		return fmt.Errorf("zero: rank %d: bad checkpoint tag %q", rank, tag)
	}
	sub := filepath.Join(dir, tag)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return fmt.Errorf("zero: rank %d: checkpoint directory: %w", rank, err)
	}
	fault := func(stage string) {
		if saveFault != nil {
			saveFault(rank, stage)
		}
	}
	fault("begin")
	var entries []nn.StateEntry
	for _, sg := range s.Segments {
		for _, p := range sg.Parts {
			entries = append(entries, optim.PartEntry(p.Param, p, sg.Data[p.SegOffset:p.SegOffset+p.Len]))
		}
	}
	entries = append(entries, s.Optimizer.StateDict()...)
	if rank == 0 {
		for _, b := range s.Params.Buffers {
			entries = append(entries, nn.StateEntry{Name: b.Name, Shape: b.Shape, F32: b.Data, I64: b.Int64})
		}
	}
	path := filepath.Join(sub, shardName(rank, world))
	if err := checkpoint.Save(path, entries); err != nil {
		return fmt.Errorf("zero: rank %d: shard %s: %w", rank, path, err)
	}
	fault("shard-written")
	if err := s.Group.Barrier().Wait(ctx); err != nil {
		return fmt.Errorf("zero: rank %d: checkpoint %s: waiting for the other ranks' shards: %w", rank, sub, err)
	}
	if rank == 0 {
		m := Manifest{Format: ManifestFormat, Tag: tag, World: world, Psi: s.Params.NumParams()}
		for r := range world {
			m.Files = append(m.Files, shardName(r, world))
		}
		for _, p := range s.Params.Params {
			m.Params = append(m.Params, ParamInfo{Name: p.Name, Shape: p.Shape})
		}
		if st, ok := s.Optimizer.(interface{ Steps() int64 }); ok {
			m.Steps = st.Steps()
		}
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return fmt.Errorf("zero: rank 0: manifest: %w", err)
		}
		if err := writeBytes(filepath.Join(sub, ManifestName), b); err != nil {
			return fmt.Errorf("zero: rank 0: %w", err)
		}
		fault("manifest-written")
		if err := writeBytes(filepath.Join(dir, LatestName), []byte(tag+"\n")); err != nil {
			return fmt.Errorf("zero: rank 0: %w", err)
		}
	}
	if err := s.Group.Barrier().Wait(ctx); err != nil {
		return fmt.Errorf("zero: rank %d: checkpoint %s: waiting for rank 0's manifest: %w", rank, sub, err)
	}
	return nil
}

func shardName(rank, world int) string { return fmt.Sprintf("shard-%d-of-%d.npz", rank, world) }

// writeBytes writes b to path with checkpoint.WriteFile (atomic and durable).
func writeBytes(path string, b []byte) error {
	return checkpoint.WriteFile(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// ReadManifest resolves a checkpoint: dir's LATEST tag (or dir itself when it holds a
// manifest) and its manifest. It returns the checkpoint directory and the manifest.
func ReadManifest(dir string) (string, *Manifest, error) {
	sub := dir
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err != nil {
		tag, err := os.ReadFile(filepath.Join(dir, LatestName))
		if err != nil {
			return "", nil, fmt.Errorf("%w in %s (no manifest, no %s): %w", ErrNoCheckpoint, dir, LatestName, err)
		}
		sub = filepath.Join(dir, strings.TrimSpace(string(tag)))
	}
	b, err := os.ReadFile(filepath.Join(sub, ManifestName))
	if err != nil {
		return "", nil, fmt.Errorf("zero: checkpoint %s: %w", sub, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", nil, fmt.Errorf("zero: checkpoint %s: manifest: %w", sub, err)
	}
	if m.Format != ManifestFormat || len(m.Files) != m.World {
		return "", nil, fmt.Errorf("zero: checkpoint %s: manifest format %q with %d files for world %d", sub, m.Format, len(m.Files), m.World)
	}
	return sub, &m, nil
}

// ReadEntries reads every shard of the checkpoint in dir (see ReadManifest).
func ReadEntries(dir string) ([]nn.StateEntry, *Manifest, error) {
	sub, m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	var all []nn.StateEntry
	for _, f := range m.Files {
		es, err := checkpoint.Load(filepath.Join(sub, f))
		if err != nil {
			return nil, nil, fmt.Errorf("zero: checkpoint %s: %w", sub, err)
		}
		all = append(all, es...)
	}
	return all, m, nil
}

// Load restores this rank's shard, the optimizer state and the model's buffers from a
// checkpoint written at any world size, on any backend (dir as for ReadManifest), or
// from a consolidated .npz file with whole-parameter keys. It reads every shard file; no
// communication.
// Afterwards disk-offloaded state is dropped from memory, or the backend takes what was
// loaded.
func (e *Engine) Load(path string) error {
	if e.closed {
		return ErrClosed
	}
	s, after := e.shard(), e.releaseState
	if e.be != nil {
		var err error
		if s, err = e.be.Checkpoint(context.Background(), false); err != nil {
			return fmt.Errorf("zero: rank %d: load %s: %w", e.rank, path, err)
		}
		after = e.be.Loaded
	}
	if err := s.Load(path); err != nil {
		return err
	}
	if err := after(); err != nil {
		return fmt.Errorf("zero: rank %d: load %s: %w", e.rank, path, err)
	}
	return nil
}

// Load fills the shard's segments, the optimizer state and the model's buffers as
// Engine.Load describes.
func (s Shard) Load(path string) error {
	rank := s.Group.Rank()
	var entries []nn.StateEntry
	var err error
	if st, serr := os.Stat(path); serr == nil && !st.IsDir() {
		entries, err = checkpoint.Load(path)
	} else {
		entries, _, err = ReadEntries(path)
	}
	if err != nil {
		return fmt.Errorf("zero: rank %d: %w", rank, err)
	}
	idx := optim.NewSlices(entries)
	for _, sg := range s.Segments {
		for _, p := range sg.Parts {
			if err := idx.Fill(p.Param, p, sg.Data[p.SegOffset:p.SegOffset+p.Len]); err != nil {
				return fmt.Errorf("zero: rank %d: parameter %s: %w", rank, p.Param, err)
			}
		}
	}
	for _, b := range s.Params.Buffers {
		saved, ok := idx.Whole[b.Name]
		if !ok {
			return fmt.Errorf("zero: rank %d: buffer %s missing from the checkpoint", rank, b.Name)
		}
		if len(saved.F32) != len(b.Data) || len(saved.I64) != len(b.Int64) {
			return fmt.Errorf("zero: rank %d: buffer %s: saved %d values, want %d", rank, b.Name, saved.Numel(), b.Numel())
		}
		copy(b.Data, saved.F32)
		copy(b.Int64, saved.I64)
	}
	optEntries := slices.DeleteFunc(slices.Clone(entries), func(e nn.StateEntry) bool { return !strings.HasPrefix(e.Name, optim.Prefix) })
	if err := s.Optimizer.LoadStateDict(optEntries); err != nil {
		return fmt.Errorf("zero: rank %d: optimizer state: %w", rank, err)
	}
	return nil
}

// Consolidate merges the checkpoint in dir into one state dict (optim.Consolidate): every
// parameter whole under its torchvision name, the buffers, and with withOptim the optimizer
// state under whole-parameter keys. Write it with checkpoint.Save.
func Consolidate(dir string, withOptim bool) ([]nn.StateEntry, *Manifest, error) {
	entries, m, err := ReadEntries(dir)
	if err != nil {
		return nil, nil, err
	}
	if !withOptim {
		entries = slices.DeleteFunc(entries, func(e nn.StateEntry) bool { return strings.HasPrefix(e.Name, optim.Prefix) })
	}
	shapes := map[string][]int{}
	for _, p := range m.Params {
		shapes[p.Name] = p.Shape
	}
	out, err := optim.Consolidate(entries, shapes)
	if err != nil {
		return nil, nil, fmt.Errorf("zero: consolidate %s: %w", dir, err)
	}
	for _, p := range m.Params {
		if !slices.ContainsFunc(out, func(e nn.StateEntry) bool { return e.Name == p.Name }) {
			return nil, nil, fmt.Errorf("zero: consolidate %s: parameter %s missing", dir, p.Name)
		}
	}
	return out, m, nil
}

// ErrNoCheckpoint is wrapped when a directory holds no complete checkpoint.
var ErrNoCheckpoint = errors.New("zero: no complete checkpoint")
