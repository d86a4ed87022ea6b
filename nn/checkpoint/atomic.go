package checkpoint

import (
	"bufio"
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
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
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
