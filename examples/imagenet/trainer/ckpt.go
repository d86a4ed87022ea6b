package trainer

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// Note [Exact resume]
//
// A run resumed from the checkpoint of step S, after an attempt that went further and was
// killed anywhere, redoes steps S+1... exactly as an uninterrupted run does them
// (TestSIGKILLMidEpochResumesBitIdentical). The checkpoint holds what changes from step to
// step: parameters and buffers, the optimizer's state, the schedule, the loss scaler, the
// step and epoch, and the dropout RNG's (seed, counter). Everything else is a function of
// (seed, epoch, step) and so needs no saving: the sampler's order is drawn from (seed,
// epoch); each sample's augmentation from (seed, epoch, index) (data.SampleSeed), whatever
// the worker count (WebDataset shards: from seed, epoch, rank and worker, so for the same
// -j); and the loader's position is S's batch within its epoch, which the
// resumed run skips to (split.batches). The metrics log drops the records after S when it
// opens (OpenMetrics), so the redone steps are logged once.

// checkpoints manages a run directory's checkpoints: ckpt-<step>.npz, written atomically
// (checkpoint.Save: temp file, fsync, rename), the newest keep of them kept.
type checkpoints struct {
	dir  string
	keep int
	log  *slog.Logger
}

func (c *checkpoints) path(step int64) string {
	return filepath.Join(c.dir, fmt.Sprintf("ckpt-%09d.npz", step))
}

// list returns the checkpoint files in dir, newest first.
func (c *checkpoints) list() ([]string, error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("trainer: checkpoints in %s: %w", c.dir, err)
	}
	type ck struct {
		step int64
		path string
	}
	var cks []ck
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "ckpt-") || !strings.HasSuffix(name, ".npz") {
			continue
		}
		step, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, "ckpt-"), ".npz"), 10, 64)
		if err != nil {
			continue
		}
		cks = append(cks, ck{step, filepath.Join(c.dir, name)})
	}
	sort.Slice(cks, func(i, j int) bool { return cks[i].step > cks[j].step })
	out := make([]string, len(cks))
	for i, k := range cks {
		out[i] = k.path
	}
	return out, nil
}

// save writes the state as the checkpoint of its step and removes the oldest beyond keep.
func (c *checkpoints) save(st *checkpoint.State) (string, error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return "", fmt.Errorf("trainer: checkpoint directory %s: %w", c.dir, err)
	}
	path := c.path(st.Step)
	entries, err := st.Entries()
	if err != nil {
		return "", err
	}
	if err := checkpoint.Save(path, entries); err != nil {
		return "", err
	}
	all, err := c.list()
	if err != nil {
		return path, err
	}
	for i := c.keep; i < len(all); i++ {
		if err := os.Remove(all[i]); err != nil {
			c.log.Warn("could not remove old checkpoint", "path", all[i], "err", err)
		}
	}
	// Temporaries of checkpoints whose writer was killed mid-write (checkpoint.WriteFile's
	// ".NAME.tmp-*", from an earlier attempt): this process is the directory's only
	// checkpoint writer and has no write in progress now, so any there are stale.
	stale, _ := filepath.Glob(filepath.Join(c.dir, ".ckpt-*.npz.tmp-*"))
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			c.log.Warn("could not remove a stale checkpoint temporary", "path", p, "err", err)
		}
	}
	return path, nil
}

// loadLatest reads the newest checkpoint that loads; a corrupt one is reported and the
// previous one tried. It returns "" when there is none.
func (c *checkpoints) loadLatest() (string, []nn.StateEntry, error) {
	all, err := c.list()
	if err != nil {
		return "", nil, err
	}
	for _, p := range all {
		entries, err := checkpoint.Load(p)
		if err == nil {
			return p, entries, nil
		}
		c.log.Warn("checkpoint unreadable, falling back to the previous one", "path", p, "err", err)
		fmt.Fprintf(os.Stderr, "trainer: checkpoint %s is unreadable (%v); falling back to the previous one\n", p, err)
	}
	return "", nil, nil
}
