package trainer

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// WithCPUProfile writes a CPU profile named for the rank, in pprof's format (a gzipped
// profile whose string table names the cpu sample type); a process already being profiled
// refuses it, saying why, and leaves no file; without the option nothing is written.
func TestCPUProfilePerRank(t *testing.T) {
	src := DatasetSource{Train: blobs{12}, Classes: 3, Workers: 1}
	fit := func(dir string, extra ...Option) error {
		opts := append([]Option{WithBatchSize(4), WithDir(filepath.Join(dir, "run")), WithOutput(io.Discard), WithTimelines(0),
			WithGroup(comm.NewLocalGroups(1)[0])}, extra...)
		tr, err := New(opts...)
		if err != nil {
			return err
		}
		_, err = tr.Fit(context.Background(), Graph(dense), src)
		return err
	}
	for _, tc := range []struct {
		name      string
		profile   bool // WithCPUProfile(DIR/cpu.pprof)
		busy      bool // the process is already being profiled
		wantErr   string
		wantFiles []string
	}{
		{name: "profiled", profile: true, wantFiles: []string{"cpu.pprof.rank0", "run"}},
		{name: "off", wantFiles: []string{"run"}},
		{name: "process already profiled", profile: true, busy: true, wantErr: "one process profiles one rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var opts []Option
			if tc.profile {
				opts = append(opts, WithCPUProfile(filepath.Join(dir, "cpu.pprof")))
			}
			if tc.busy {
				if err := pprof.StartCPUProfile(io.Discard); err != nil {
					t.Fatal(err)
				}
				defer pprof.StopCPUProfile()
			}
			err := fit(dir, opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "rank 0") {
					t.Fatalf("Fit: %v, want an error naming rank 0 and saying %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var names []string
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if strings.Join(names, " ") != strings.Join(tc.wantFiles, " ") {
				t.Errorf("files %q, want %q", names, tc.wantFiles)
			}
			if !tc.profile || tc.busy {
				return
			}
			raw, err := os.ReadFile(filepath.Join(dir, "cpu.pprof.rank0"))
			if err != nil {
				t.Fatal(err)
			}
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("the profile is not gzipped as pprof writes it: %v", err)
			}
			pb, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(pb, []byte("cpu")) || !bytes.Contains(pb, []byte("nanoseconds")) {
				t.Errorf("the profile (%d bytes) does not name the cpu/nanoseconds sample type", len(pb))
			}
		})
	}
}
