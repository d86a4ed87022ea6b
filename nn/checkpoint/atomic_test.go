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
