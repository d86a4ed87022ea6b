// Package webdataset reads WebDataset tar shards: brace-expanded shard lists, samples grouped by
// key as webdataset does, cls/jpg/png/npy/json decoders, rank and worker splits, a shuffle buffer.
package webdataset

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/data"
)

// ErrMissing marks a sample without a field the decoder needs, such as its label.
var ErrMissing = errors.New("sample field missing")

// MaxShards bounds the names one pattern may expand to.
const MaxShards = 1 << 20

// Expand expands braces as webdataset's braceexpand: "{000..099}" is a zero-padded numeric range
// (padded to the width of the first bound), "{a,b}" a list; several braces multiply. A pattern
// expanding to more than MaxShards names is an error.
func Expand(pattern string) ([]string, error) {
	i := strings.IndexByte(pattern, '{')
	if i < 0 {
		return []string{pattern}, nil
	}
	j := strings.IndexByte(pattern[i:], '}')
	if j < 0 {
		return nil, fmt.Errorf("shard pattern %q: unclosed brace", pattern)
	}
	body, rest := pattern[i+1:i+j], pattern[i+j+1:]
	var alts []string
	if lo, hi, ok := strings.Cut(body, ".."); ok {
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("shard pattern %q: bad range {%s}", pattern, body)
		}
		if b-a >= MaxShards || b-a < 0 {
			return nil, fmt.Errorf("shard pattern %q: range {%s} has more than %d names", pattern, body, MaxShards)
		}
		for v := a; v <= b; v++ {
			alts = append(alts, fmt.Sprintf("%0*d", len(lo), v))
		}
	} else {
		alts = strings.Split(body, ",")
	}
	tails, err := Expand(rest)
	if err != nil {
		return nil, err
	}
	if len(alts)*len(tails) > MaxShards {
		return nil, fmt.Errorf("shard pattern %q expands to more than %d names", pattern, MaxShards)
	}
	var out []string
	for _, a := range alts {
		for _, t := range tails {
			out = append(out, pattern[:i]+a+t)
		}
	}
	return out, nil
}

// Split returns the shards of one rank's worker, as webdataset's split_by_node then
// split_by_worker: shards[rank::world], then of those [worker::workers].
func Split(shards []string, rank, world, worker, workers int) []string {
	var node, out []string
	for i := rank; i < len(shards); i += max(world, 1) {
		node = append(node, shards[i])
	}
	for i := worker; i < len(node); i += max(workers, 1) {
		out = append(out, node[i])
	}
	return out
}

// Sample is one webdataset sample: its key and its files by extension (lower case, everything
// after the first dot of the base name, e.g. "jpg", "seg.png").
type Sample struct {
	Key   string
	Shard string
	Files map[string][]byte
}

// splitName is webdataset's base_plus_ext: the key is the path up to the first dot of the base name.
func splitName(name string) (key, ext string, ok bool) {
	dir, base := path.Split(name)
	k, e, found := strings.Cut(base, ".")
	if !found || k == "" {
		return "", "", false
	}
	return dir + k, strings.ToLower(e), true
}

// ReadShard streams the samples of one tar shard to fn, grouping consecutive files with the
// same key; files without a dot and directories are ignored, as webdataset does. Errors name the shard.
func ReadShard(ctx context.Context, shard string, fn func(Sample) error) error {
	f, err := os.Open(shard)
	if err != nil {
		return fmt.Errorf("shard %s: %w", shard, err)
	}
	defer f.Close()
	return ReadTar(ctx, shard, f, fn)
}

// ReadTar is ReadShard over a reader; name is used in errors and Sample.Shard. A tar that
// ends without its end-of-archive block (a shard cut at a member boundary, which the tar
// format cannot otherwise tell from a complete one) is an error wrapping data.ErrCorrupt
// after the samples before the cut were passed to fn.
func ReadTar(ctx context.Context, name string, r io.Reader, fn func(Sample) error) error {
	zr := &zeroTail{r: r}
	tr := tar.NewReader(zr)
	samples := 0
	cur := Sample{Shard: name}
	flush := func() error {
		if cur.Files == nil {
			return nil
		}
		s := cur
		cur = Sample{Shard: name}
		samples++
		return fn(s)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			if zr.zeros < 512 {
				if err := flush(); err != nil {
					return err
				}
				return fmt.Errorf("shard %s: ends after %d samples without tar's end-of-archive block (cut at a member boundary?): %w",
					name, samples, data.ErrCorrupt)
			}
			break
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("shard %s: ends inside a member's header after %d samples (truncated): %w: %w", name, samples, err, data.ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("shard %s: after %d samples: %w (not a tar archive, or a damaged one): %w", name, samples, err, data.ErrCorrupt)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		key, ext, ok := splitName(h.Name)
		if !ok {
			continue
		}
		b, err := io.ReadAll(tr)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("shard %s: ends inside member %s after %d samples (truncated): %w: %w", name, h.Name, samples, err, data.ErrCorrupt)
		}
		if err != nil {
			return fmt.Errorf("shard %s: %s: %w", name, h.Name, err)
		}
		if cur.Files != nil && key != cur.Key {
			if err := flush(); err != nil {
				return err
			}
		}
		if cur.Files == nil {
			cur.Key, cur.Files = key, map[string][]byte{}
		}
		cur.Files[ext] = b
	}
	return flush()
}

// zeroTail counts the zero bytes at the end of what was read so far: a tar ends with zero
// blocks (two by the standard; archive/tar stops at the first).
type zeroTail struct {
	r     io.Reader
	zeros int
}

func (z *zeroTail) Read(p []byte) (int, error) {
	n, err := z.r.Read(p)
	i := n
	for i > 0 && p[i-1] == 0 {
		i--
	}
	if i == 0 {
		z.zeros += n
	} else {
		z.zeros = n - i
	}
	return n, err
}
