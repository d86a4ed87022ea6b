package trainer

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/parallel/zero"
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

// Note [Checkpoint rotation]
//
// Every strategy's checkpoints follow one rule (checkpoints): each is named by its step,
// ckpt-<step>.npz (replicated: rank 0's file) or zero/step-<step>/ (ZeRO-3: a directory of
// shards, complete once zero's manifest is in it). After a save, the newest keep complete
// ones stay; older ones, incomplete ones older than the newest complete one, and stale
// temporaries of killed writes go. A resume ("auto") takes the newest checkpoint that loads
// completely: each that does not is reported, naming it and why, and the previous one is
// tried; when none loads, the newest one's error ends the run, naming it, so that a run
// never starts over on top of checkpoints it could not read (they are kept). A run directory
// holding only the other layout's checkpoints (another -strategy) is refused the same way.

// checkpoints manages a run directory's checkpoints by the rule of Note [Checkpoint
// rotation]; sharded selects ZeRO-3's layout (dir is then OUT/zero).
type checkpoints struct {
	dir     string
	keep    int
	log     *slog.Logger
	sharded bool
}

// name is the checkpoint name of step; parse reads it back.
func (c *checkpoints) name(step int64) string {
	if c.sharded {
		return fmt.Sprintf("step-%09d", step)
	}
	return fmt.Sprintf("ckpt-%09d.npz", step)
}

func (c *checkpoints) parse(name string) (int64, bool) {
	prefix, suffix := "ckpt-", ".npz"
	if c.sharded {
		prefix, suffix = "step-", ""
	}
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	step, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 10, 64)
	return step, err == nil && step >= 0
}

func (c *checkpoints) path(step int64) string { return filepath.Join(c.dir, c.name(step)) }

// complete reports whether the checkpoint at path was written to the end: a file is (it
// is renamed into place whole); a ZeRO-3 directory once it holds the manifest.
func (c *checkpoints) complete(path string) bool {
	if !c.sharded {
		return true
	}
	_, err := os.Stat(filepath.Join(path, zero.ManifestName))
	return err == nil
}

type ckptFile struct {
	step     int64
	path     string
	complete bool
}

// scan returns dir's checkpoints, complete or not, newest first.
func (c *checkpoints) scan() ([]ckptFile, error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("trainer: checkpoints in %s: %w", c.dir, err)
	}
	var cks []ckptFile
	for _, e := range ents {
		step, ok := c.parse(e.Name())
		if !ok || e.IsDir() != c.sharded {
			continue
		}
		p := filepath.Join(c.dir, e.Name())
		cks = append(cks, ckptFile{step, p, c.complete(p)})
	}
	sort.Slice(cks, func(i, j int) bool { return cks[i].step > cks[j].step })
	return cks, nil
}

// list returns the complete checkpoints, newest first.
func (c *checkpoints) list() ([]string, error) {
	cks, err := c.scan()
	var out []string
	for _, k := range cks {
		if k.complete {
			out = append(out, k.path)
		}
	}
	return out, err
}

// prune removes what the rule does not keep; failures are warnings (a checkpoint that could
// not be removed costs disk, not the run).
func (c *checkpoints) prune() {
	cks, err := c.scan()
	if err != nil {
		c.log.Warn("could not list old checkpoints", "dir", c.dir, "err", err)
		return
	}
	kept, newest := 0, int64(-1)
	for _, k := range cks {
		switch {
		case k.complete && kept < c.keep:
			kept++
			newest = max(newest, k.step)
			continue
		case !k.complete && (newest < 0 || k.step > newest):
			continue // a checkpoint being written, or the newest attempt's
		}
		if err := os.RemoveAll(k.path); err != nil {
			c.log.Warn("could not remove old checkpoint", "path", k.path, "err", err)
		}
	}
	// Temporaries of checkpoints whose writer was killed mid-write (from an earlier
	// attempt): this process is the directory's only checkpoint writer and has no write in
	// progress now, so any there are stale.
	if _, err := checkpoint.RemoveTemps(c.dir, "ckpt-*.npz"); err != nil {
		c.log.Warn("could not remove a stale checkpoint temporary", "err", err)
	}
}

// save writes the state as the npz checkpoint of its step and prunes.
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
	c.prune()
	return path, nil
}

// open applies load to -resume's path: "auto" is the newest checkpoint under c that loads
// (newest), "none" and "" load nothing, any other path is that checkpoint. It returns the
// checkpoint loaded, "" for none.
func (c *checkpoints) open(path string, load func(path string) error) (string, error) {
	switch path {
	case "none", "":
		return "", nil
	case "auto":
		return c.newest(load)
	}
	if err := load(path); err != nil {
		return "", err
	}
	return path, nil
}

// newest applies load to the complete checkpoints, newest first, and returns the first
// that loads; "" when there is none. See Note [Checkpoint rotation].
func (c *checkpoints) newest(load func(path string) error) (string, error) {
	all, err := c.list()
	if err != nil {
		return "", err
	}
	if len(all) == 0 {
		return "", c.otherLayout()
	}
	var first error
	for i, p := range all {
		err := load(p)
		if err == nil {
			return p, nil
		}
		if first == nil {
			first = err
		}
		if i < len(all)-1 {
			fmt.Fprintf(os.Stderr, "trainer: checkpoint %s does not load (%v); falling back to the previous one\n", p, err)
		}
	}
	return "", fmt.Errorf("trainer: resume: none of the %d checkpoints in %s loads (they are kept; -resume none starts over beside them): the newest, %s: %w",
		len(all), c.dir, all[0], first)
}

// otherLayout is an error when the run directory holds checkpoints of the other layout
// (another -strategy), nil otherwise.
func (c *checkpoints) otherLayout() error {
	other := checkpoints{dir: filepath.Join(c.dir, "zero"), sharded: true}
	mine, theirs := "a replicated strategy's (ddp, dp, none)", "-strategy zero3"
	if c.sharded {
		other = checkpoints{dir: filepath.Dir(c.dir)}
		mine, theirs = theirs, "a replicated strategy (ddp, dp, none)"
	}
	found, _ := other.list()
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("trainer: resume: %s holds checkpoints of %s (%s), not %s: resume it with that strategy, or pass -resume none to start over beside them",
		filepath.Dir(found[0]), theirs, filepath.Base(found[0]), mine)
}

// mismatchHint says what a checkpoint whose state does not fit the model usually is.
func mismatchHint(err error) string {
	if errors.Is(err, checkpoint.ErrMismatch) {
		return " (a checkpoint of another -arch or -num-classes? -resume none starts over beside it)"
	}
	return ""
}
