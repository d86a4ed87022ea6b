package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// WriteOption configures WriteFile.
type WriteOption func(*writeConfig)

type writeConfig struct {
	perm fs.FileMode
}

// WithPerm sets the permission bits of the file WriteFile creates (default 0o644; the
// process's umask does not apply).
func WithPerm(perm fs.FileMode) WriteOption {
	return func(c *writeConfig) { c.perm = perm.Perm() }
}

// WriteFile replaces the file at path with what write produces, atomically and durably.
// It is the one place in the module that writes a file by temporary name and rename:
// checkpoints, ZeRO manifests, the trainer's plots and timelines all go through it.
//
// The contract, in order:
//  1. a temporary file ".<base>.tmp-*" is created in path's directory (so the rename
//     below stays within one file system; the directory must exist);
//  2. write is called once with a buffered writer on it (write need not buffer);
//  3. the buffer is flushed, the file fsynced, its mode set, and it is closed;
//  4. it is renamed over path;
//  5. the directory is fsynced, so the rename itself survives a crash (skipped on
//     Windows, which cannot sync a directory). Its error is returned: a rename that is not
//     durable is a failure.
//
// Until step 4 the previous file at path, if any, is untouched; readers see either the old
// or the new content, never a mix. On every error before step 4 the temporary file is
// removed. Errors wrap the cause with %w and name path ("checkpoint: write PATH: ...").
// write's own error is returned wrapped the same way.
func WriteFile(path string, write func(io.Writer) error, opts ...WriteOption) (err error) {
	c := writeConfig{perm: 0o644}
	for _, o := range opts {
		o(&c)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("checkpoint: write %s: %w", path, err)
		}
	}()
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(path)+tempSuffix)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close() // may already be closed; the error is the one already returned
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Chmod(c.perm); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	return syncDir(dir)
}

// tempPrefix and tempSuffix frame the base name of the file in WriteFile's temporaries,
// ".<base>.tmp-*" (os.CreateTemp replaces the star).
const tempPrefix, tempSuffix = ".", ".tmp-*"

// RemoveTemps removes the temporaries that WriteFile leaves in dir when its process is
// killed between creating one and renaming it: ".<base>.tmp-*" for the files whose base
// name matches pattern (filepath.Match syntax, "ckpt-*.npz"). A write in progress has a
// temporary of the same form, so only the files' one writer calls it, while it has none of
// their writes in progress (as a job restarted after a kill does before it writes them
// again). It returns the paths it removed; its error names each temporary it could not
// remove (the others are removed all the same), or the pattern when it is malformed.
func RemoveTemps(dir, pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("checkpoint: temporaries of %q in %s: %w", pattern, dir, err)
	}
	found, err := filepath.Glob(filepath.Join(dir, tempPrefix+pattern+tempSuffix))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: temporaries of %q in %s: %w", pattern, dir, err)
	}
	var removed []string
	var errs []error
	for _, p := range found {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("checkpoint: removing the stale temporary %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}

// syncDir fsyncs directory dir, making the entries renamed into it durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return d.Close()
}
