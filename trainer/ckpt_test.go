package trainer

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/zero"
)

// The one rotation rule, for both layouts: after a save the newest keep complete
// checkpoints stay, and so does an incomplete one newer than them (being written); older
// and incomplete-older ones go, and so do stale temporaries.
func TestCheckpointRotationRule(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, sharded := range []bool{false, true} {
		dir := t.TempDir()
		c := &checkpoints{dir: dir, keep: 2, log: quiet, sharded: sharded}
		complete := map[int64]bool{1: true, 2: true, 3: true, 4: !sharded, 5: true, 6: !sharded}
		for step := int64(1); step <= 6; step++ {
			if sharded {
				if err := os.MkdirAll(c.path(step), 0o755); err != nil {
					t.Fatal(err)
				}
				if complete[step] {
					writeFile(t, filepath.Join(c.path(step), zero.ManifestName), "{}")
				}
			} else {
				writeFile(t, c.path(step), "x")
			}
		}
		writeFile(t, filepath.Join(dir, ".ckpt-000000007.npz.tmp-123"), "torn")
		c.prune()
		var left []string
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			left = append(left, e.Name())
		}
		want := []string{"ckpt-000000005.npz", "ckpt-000000006.npz"}
		if sharded {
			want = []string{"step-000000003", "step-000000005", "step-000000006"} // 6 is being written
		}
		if !slices.Equal(left, want) {
			t.Errorf("sharded %v: left %v, want %v", sharded, left, want)
		}
	}
}

// A resume takes the newest checkpoint that loads, falling back past ones that do not; when
// none loads it fails naming the newest (and deletes nothing); a directory with only the
// other layout's checkpoints is refused naming the strategy.
func TestCheckpointNewestReadable(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	c := &checkpoints{dir: dir, keep: 3, log: quiet}
	for step := int64(1); step <= 3; step++ {
		writeFile(t, c.path(step), "x")
	}
	bad := errors.New("torn")
	var tried []string
	got, err := c.newest(func(p string) error {
		tried = append(tried, filepath.Base(p))
		if strings.Contains(p, "000000003") {
			return bad
		}
		return nil
	})
	if err != nil || filepath.Base(got) != "ckpt-000000002.npz" || len(tried) != 2 {
		t.Errorf("newest = %q, %v after trying %v: want ckpt-000000002.npz after 3 and 2", got, err, tried)
	}
	_, err = c.newest(func(string) error { return bad })
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), c.path(3)) {
		t.Errorf("none loads: err = %v, want the newest's error naming it", err)
	}
	if all, _ := c.list(); len(all) != 3 {
		t.Errorf("%d checkpoints left after failed resumes, want 3", len(all))
	}

	// Only ZeRO-3's checkpoints in the run directory of a replicated run, and the reverse.
	zdir := t.TempDir()
	z := &checkpoints{dir: filepath.Join(zdir, "zero"), keep: 1, log: quiet, sharded: true}
	if err := os.MkdirAll(z.path(4), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(z.path(4), zero.ManifestName), "{}")
	r := &checkpoints{dir: zdir, keep: 1, log: quiet}
	if _, err := r.newest(func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "-strategy zero3") {
		t.Errorf("replicated resume over zero3 checkpoints: %v", err)
	}
	zr := &checkpoints{dir: filepath.Join(dir, "zero"), keep: 1, log: quiet, sharded: true}
	if _, err := zr.newest(func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "replicated strategy") {
		t.Errorf("zero3 resume over replicated checkpoints: %v", err)
	}
	empty := &checkpoints{dir: t.TempDir(), keep: 1, log: quiet}
	if p, err := empty.newest(func(string) error { return nil }); p != "" || err != nil {
		t.Errorf("no checkpoints: %q, %v", p, err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
