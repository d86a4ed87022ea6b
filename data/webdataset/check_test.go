package webdataset_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/webdataset"
)

// shardFiles is n samples with labels from labels (cycled) and tiny JPEGs.
func shardFiles(t *testing.T, n int, labels ...int) []file {
	var files []file
	for k := range n {
		key := fmt.Sprintf("s%06d", k)
		files = append(files, file{key + ".jpg", jpeg(t, uint8(k*30))},
			file{key + ".cls", []byte(fmt.Sprint(labels[k%len(labels)]))})
	}
	return files
}

// TestScan: a shard cut at a member boundary is reported even without an index (its tar
// end-of-archive block is gone), a shard shorter than its index says wraps ErrShort, and bad
// labels are listed with the shard, the sample and the value.
func TestScan(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "train-000.tar")
	writeTar(t, whole, shardFiles(t, 4, 0, 1, 2))
	b, _ := os.ReadFile(whole)
	// Cut after the second sample: each member is a 512-byte header and its padded data.
	cut := filepath.Join(dir, "train-001.tar")
	off := 0
	for range 4 { // two samples of two members
		size := 0
		fmt.Sscanf(strings.TrimRight(string(b[off+124:off+136]), "\x00 "), "%o", &size)
		off += 512 + (size+511)/512*512
	}
	os.WriteFile(cut, b[:off], 0o644)
	complete := filepath.Join(dir, "train-002.tar") // complete, but the index wants more
	writeTar(t, complete, shardFiles(t, 3, 0))
	badLabels := filepath.Join(dir, "train-003.tar")
	writeTar(t, badLabels, shardFiles(t, 3, 1, 1_000_000, -1))

	index := filepath.Join(dir, "sizes.json")
	os.WriteFile(index, []byte(`{"train-000.tar": 4, "train-002.tar": 5}`), 0o644)
	idx, err := webdataset.ReadShardIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, shard string
		classes     int
		want        string // a part of the error; "" for none
		wantErr     error
		samples     int
		bad         []string // parts of the bad samples' errors
	}{
		{"whole", whole, 3, "", nil, 4, nil},
		{"cut at a member boundary", cut, 3, cut + ": ends after 2 samples without tar's end-of-archive block", data.ErrCorrupt, 2, nil},
		{"shorter than its index", complete, 3, complete + ": 3 samples, its index says 5", webdataset.ErrShort, 3, nil},
		{"bad labels", badLabels, 10, "", nil, 3, []string{badLabels + ": sample s000001: label 1000000 (want 0..9 for 10 classes)",
			badLabels + ": sample s000002: label -1 (want 0..9 for 10 classes)"}},
		{"labels beyond the class count", whole, 2, "", nil, 4, []string{whole + ": sample s000002: label 2 (want 0..1 for 2 classes)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := webdataset.Scan(context.Background(), tc.shard, tc.classes, idx.Expected(tc.shard))
			if tc.want != "" {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v: want %v with %q", err, tc.wantErr, tc.want)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if st.Samples != tc.samples || len(st.Bad) != len(tc.bad) {
				t.Fatalf("stats %+v: want %d samples, %d bad", st, tc.samples, len(tc.bad))
			}
			for i, e := range st.Bad {
				if !errors.Is(e, data.ErrBadLabel) || !strings.Contains(e.Error(), tc.bad[i]) {
					t.Errorf("bad sample %d: %v, want ErrBadLabel with %q", i, e, tc.bad[i])
				}
			}
		})
	}
}

// TestShardIndexForms: open_clip's sizes.json and webdataset's wids shard list give the
// same counts; garbage is ErrCorrupt naming the file.
func TestShardIndexForms(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body string }{
		{"sizes.json", `{"train-000.tar": 7, "sub/train-001.tar": 9}`},
		{"wids.json", `{"wids_version": 1, "shardlist": [{"url": "train-000.tar", "nsamples": 7}, {"url": "http://host/x/train-001.tar", "nsamples": 9}]}`},
	} {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, []byte(tc.body), 0o644)
		idx, err := webdataset.ReadShardIndex(p)
		if err != nil {
			t.Fatal(err)
		}
		if a, b, c := idx.Expected("/data/train-000.tar"), idx.Expected("train-001.tar"), idx.Expected("val-000.tar"); a != 7 || b != 9 || c != -1 {
			t.Errorf("%s: counts %d %d %d, want 7 9 -1", tc.name, a, b, c)
		}
	}
	p := filepath.Join(dir, "bad.json")
	os.WriteFile(p, []byte(`[1, 2]`), 0o644)
	if _, err := webdataset.ReadShardIndex(p); !errors.Is(err, data.ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Errorf("garbage index: %v", err)
	}
}

// TestLoaderSkipBadLabels: under SkipBadLabels the loader leaves out exactly the samples
// Scan lists as bad, so Scan's Good count is the rank's stream; under Fail the first stops
// it with the shard, sample and value.
func TestLoaderSkipBadLabels(t *testing.T) {
	p := filepath.Join(t.TempDir(), "train-000.tar")
	writeTar(t, p, shardFiles(t, 6, 0, 1, 9))
	st, err := webdataset.Scan(context.Background(), p, 3, -1)
	if err != nil || st.Good() != 4 {
		t.Fatalf("scan %+v, %v: want 4 good samples", st, err)
	}
	for _, bad := range []data.BadInput{data.SkipBadLabels, data.Fail} {
		l := &webdataset.Loader{Shards: []string{p}, World: 1, Workers: 1, BatchSize: 2, Pipeline: pipe(t), Classes: 3, Bad: bad}
		var labels []int64
		var fail error
		for b, err := range l.Batches(context.Background(), 0) {
			if err != nil {
				fail = err
				break
			}
			labels = append(labels, b.Labels[:b.N]...)
		}
		if bad == data.Fail {
			if !errors.Is(fail, data.ErrBadLabel) || !strings.Contains(fail.Error(), p+": sample s000002: label 9") {
				t.Errorf("Fail: %v", fail)
			}
			continue
		}
		if fail != nil || len(labels) != st.Good() || int(l.Skipped()) != len(st.Bad) || !slices.Equal(labels, []int64{0, 1, 0, 1}) {
			t.Errorf("SkipBadLabels: labels %v skipped %d, %v; want scan's %d good", labels, l.Skipped(), fail, st.Good())
		}
	}
}
