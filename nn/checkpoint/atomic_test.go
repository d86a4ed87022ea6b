package checkpoint

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFile checks WriteFile's contract: the new content replaces the old only on
// success; on any failure the previous content is intact, no temporary file is left in the
// directory, and the error names the path (and wraps the cause).
func TestWriteFile(t *testing.T) {
	errMidway := errors.New("disk full midway")
	const old = "previous content\n"
	for _, tc := range []struct {
		name string
		// setup returns the path to write in dir (after creating what the case needs).
		setup   func(t *testing.T, dir string) string
		write   func(io.Writer) error
		opts    []WriteOption
		want    string      // content at path afterwards
		perm    fs.FileMode // with want set and no error
		wantErr error       // errors.Is target, or nil for any error when failing
		fails   bool
	}{
		{
			name:  "replaces",
			setup: func(t *testing.T, dir string) string { return existing(t, dir, old) },
			write: func(w io.Writer) error { _, err := io.WriteString(w, "new\n"); return err },
			want:  "new\n", perm: 0o644,
		},
		{
			name:  "creates",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "fresh.json") },
			write: func(w io.Writer) error { _, err := io.WriteString(w, "{}"); return err },
			opts:  []WriteOption{WithPerm(0o600)},
			want:  "{}", perm: 0o600,
		},
		{
			name:  "large",
			setup: func(t *testing.T, dir string) string { return existing(t, dir, old) },
			write: func(w io.Writer) error {
				_, err := w.Write([]byte(strings.Repeat("x", 3<<20))) // beyond the 1 MiB buffer
				return err
			},
			want: strings.Repeat("x", 3<<20), perm: 0o644,
		},
		{
			name:  "write fails midway",
			setup: func(t *testing.T, dir string) string { return existing(t, dir, old) },
			write: func(w io.Writer) error {
				// More than the buffer, so part of it has reached the temporary file.
				if _, err := w.Write([]byte(strings.Repeat("y", 2<<20))); err != nil {
					return err
				}
				return errMidway
			},
			fails: true, wantErr: errMidway, want: old,
		},
		{
			name:  "missing directory",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "no-such-dir", "f.npz") },
			write: func(w io.Writer) error { return nil },
			fails: true, wantErr: fs.ErrNotExist,
		},
		{
			name: "parent is a file",
			setup: func(t *testing.T, dir string) string {
				return filepath.Join(existing(t, dir, old), "f.npz")
			},
			write: func(w io.Writer) error { return nil },
			fails: true,
		},
		{
			name: "unwritable directory",
			setup: func(t *testing.T, dir string) string {
				if os.Geteuid() == 0 {
					t.Skip("root writes into a read-only directory")
				}
				ro := filepath.Join(dir, "ro")
				if err := os.Mkdir(ro, 0o755); err != nil {
					t.Fatal(err)
				}
				p := existing(t, ro, old)
				if err := os.Chmod(ro, 0o555); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(ro, 0o755) })
				return p
			},
			write: func(w io.Writer) error { return nil },
			fails: true, wantErr: fs.ErrPermission, want: old,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.setup(t, dir)
			before := listDir(t, filepath.Dir(path))
			err := WriteFile(path, tc.write, tc.opts...)
			switch {
			case tc.fails && err == nil:
				t.Fatalf("WriteFile succeeded, want an error")
			case !tc.fails && err != nil:
				t.Fatalf("WriteFile: %v", err)
			case tc.fails && !strings.Contains(err.Error(), path):
				t.Errorf("error %q does not name %s", err, path)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("error %v does not wrap %v", err, tc.wantErr)
			}
			if tc.want != "" {
				got, rerr := os.ReadFile(path)
				if rerr != nil || string(got) != tc.want {
					t.Errorf("content afterwards: %d bytes (%v), want %d bytes", len(got), rerr, len(tc.want))
				}
			}
			if !tc.fails {
				st, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != tc.perm {
					t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
				}
				return
			}
			if after := listDir(t, filepath.Dir(path)); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Errorf("directory was %v, is %v after the failed write (temporary file left?)", before, after)
			}
		})
	}
}

// existing writes content to dir/f.npz and returns the path.
func existing(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "f.npz")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// listDir lists dir's names (nil when dir cannot be read: a missing directory).
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestRemoveTemps: the temporaries of the files a pattern names go and nothing else does;
// one that cannot be removed is named in the error while the others still go; a malformed
// pattern is an error that names it.
func TestRemoveTemps(t *testing.T) {
	files := []string{
		".ckpt-000004.npz.tmp-123", ".ckpt-000008.npz.tmp-9", "ckpt-000004.npz", ".curves.png.tmp-5",
		"notes.tmp-1", ".ckpt-000004.npz", "curves.png",
	}
	for _, tc := range []struct {
		name, pattern string
		stuck         bool     // a non-empty directory named like a temporary of pattern's files
		want          []string // base names removed
		wantErr       string   // substring of the error, "" for none
	}{
		{name: "checkpoints", pattern: "ckpt-*.npz", want: []string{".ckpt-000004.npz.tmp-123", ".ckpt-000008.npz.tmp-9"}},
		{name: "one file", pattern: "curves.png", want: []string{".curves.png.tmp-5"}},
		{name: "none", pattern: "metrics.jsonl"},
		{name: "stuck", pattern: "curves.png", stuck: true, want: []string{".curves.png.tmp-5"}, wantErr: ".curves.png.tmp-stuck"},
		{name: "bad pattern", pattern: "ckpt-[", wantErr: `"ckpt-["`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.stuck {
				if err := os.MkdirAll(filepath.Join(dir, ".curves.png.tmp-stuck", "inside"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			removed, err := RemoveTemps(dir, tc.pattern)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("RemoveTemps(%q): error %v, want one containing %q", tc.pattern, err, tc.wantErr)
			}
			var got []string
			for _, p := range removed {
				got = append(got, filepath.Base(p))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("RemoveTemps(%q) removed %q, want %q", tc.pattern, got, tc.want)
			}
			for _, f := range files {
				_, err := os.Stat(filepath.Join(dir, f))
				gone := errors.Is(err, fs.ErrNotExist)
				if wantGone := strings.Contains(","+strings.Join(tc.want, ",")+",", ","+f+","); gone != wantGone {
					t.Errorf("RemoveTemps(%q): %s gone %v, want %v", tc.pattern, f, gone, wantGone)
				}
			}
		})
	}
}

// TestRemoveTempsFindsWriteFiles: the temporary WriteFile is writing is one RemoveTemps
// finds, as a writer killed at that moment would leave it.
func TestRemoveTempsFindsWriteFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	var removed []string
	err := WriteFile(path, func(w io.Writer) error {
		var err error
		removed, err = RemoveTemps(dir, "state.json")
		return err
	})
	if len(removed) != 1 || !strings.HasPrefix(filepath.Base(removed[0]), ".state.json.tmp-") {
		t.Fatalf("RemoveTemps during WriteFile removed %q, want the one temporary being written", removed)
	}
	// The temporary is gone, so the rename fails: the error names the path.
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteFile after its temporary was removed: %v, want an error naming %s", err, path)
	}
}
