package webdataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/gorgonia-parallel/gp/data"
)

// ErrShort is wrapped by Scan's error for a shard with fewer samples than its index says.
var ErrShort = errors.New("shard shorter than its index says")

// ShardIndex is the expected number of samples of each shard, by the shard's base name.
type ShardIndex map[string]int

// ReadShardIndex reads the sample counts of shards from the JSON file at p, in either of the
// two forms WebDataset users write:
//   - open_clip's sizes.json, an object of shard base names to counts:
//     {"train-000000.tar": 1000, ...};
//   - webdataset's wids shard list: {"wids_version": 1, "shardlist": [{"url":
//     "train-000000.tar", "nsamples": 1000}, ...]} (only the URL's base name is kept).
func ReadShardIndex(p string) (ShardIndex, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("shard index %s: %w", p, err)
	}
	var wids struct {
		Shardlist []struct {
			URL      string `json:"url"`
			NSamples int    `json:"nsamples"`
		} `json:"shardlist"`
	}
	if err := json.Unmarshal(b, &wids); err == nil && wids.Shardlist != nil {
		idx := ShardIndex{}
		for _, s := range wids.Shardlist {
			idx[path.Base(s.URL)] = s.NSamples
		}
		return idx, nil
	}
	var sizes map[string]int
	if err := json.Unmarshal(b, &sizes); err != nil {
		return nil, fmt.Errorf("shard index %s: want {\"shard.tar\": count, ...} or a wids shard list: %v: %w", p, err, data.ErrCorrupt)
	}
	idx := ShardIndex{}
	for k, v := range sizes {
		idx[path.Base(k)] = v
	}
	return idx, nil
}

// Expected is the sample count the index gives shard (by base name), or -1 when it has none.
func (x ShardIndex) Expected(shard string) int {
	if n, ok := x[filepath.Base(shard)]; ok {
		return n
	}
	return -1
}

// ShardStats is what Scan found in one shard.
type ShardStats struct {
	Shard   string
	Samples int     // samples read, bad ones included
	Bad     []error // the samples whose label is missing or out of range, in order
}

// Good is the number of samples with a usable label.
func (s ShardStats) Good() int { return s.Samples - len(s.Bad) }

// Scan reads every sample of shard and checks its label (see Sample.ClassLabel; classes 0
// checks only that there is a non-negative integer label). want is the sample count the
// shard should have (from a ShardIndex; negative: unknown): fewer samples fail with an error
// wrapping ErrShort. A truncated or corrupt tar fails as ReadShard does. Bad labels do not
// fail: they are listed in the stats, for the caller to stop or skip them (the Loader skips
// exactly these under data.SkipBadLabels).
func Scan(ctx context.Context, shard string, classes, want int) (ShardStats, error) {
	st := ShardStats{Shard: shard}
	err := ReadShard(ctx, shard, func(s Sample) error {
		st.Samples++
		if _, err := s.ClassLabel(classes); err != nil {
			st.Bad = append(st.Bad, err)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	if want >= 0 && st.Samples < want {
		return st, fmt.Errorf("shard %s: %d samples, its index says %d (truncated?): %w", shard, st.Samples, want, ErrShort)
	}
	return st, nil
}

// ClassLabel is Label checked against [0, classes) (only against negative values when
// classes is 0); an out-of-range value is an error naming the shard, the sample and the value,
// wrapping data.ErrBadLabel.
func (s Sample) ClassLabel(classes int) (int64, error) {
	y, err := s.Label()
	if err != nil {
		return 0, err
	}
	if y < 0 || (classes > 0 && y >= int64(classes)) {
		want := "want >= 0"
		if classes > 0 {
			want = fmt.Sprintf("want 0..%d for %d classes", classes-1, classes)
		}
		return 0, fmt.Errorf("%s: sample %s: label %d (%s): %w", s.Shard, s.Key, y, want, data.ErrBadLabel)
	}
	return y, nil
}
