package ddp

import (
	"context"
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Bucket is a contiguous range of the flat gradient buffer that is reduced as one
// collective. Its parameters are consecutive in the buffer (reverse registration order).
type Bucket struct {
	// Index is the bucket's position in launch order.
	Index int
	// Lo and Hi delimit the bucket in nn.ParamSet.Grad: Grad == ParamSet.Grad[Lo:Hi].
	Lo, Hi int
	// Grad is the bucket's view of the gradient buffer (no copy).
	Grad []float32
	// Params are the bucket's parameters, in buffer order.
	Params []*nn.Param
}

// Bytes is the size of the bucket's gradients in bytes (float32).
func (b *Bucket) Bytes() int { return 4 * (b.Hi - b.Lo) }

// String names the bucket in errors and traces: "bucket 3 (1.00 MiB, 5 params)", or KiB below 1 MiB.
func (b *Bucket) String() string {
	size := fmt.Sprintf("%.2f MiB", float64(b.Bytes())/(1<<20))
	if b.Bytes() < 1<<20 {
		size = fmt.Sprintf("%.1f KiB", float64(b.Bytes())/(1<<10))
	}
	return fmt.Sprintf("bucket %d (%s, %d params)", b.Index, size, len(b.Params))
}

// flatOrder returns the parameters in flat buffer order (ascending Offset).
func flatOrder(ps *nn.ParamSet) []*nn.Param {
	flat := slices.Clone(ps.Params)
	slices.SortFunc(flat, func(a, b *nn.Param) int { return a.Offset - b.Offset })
	return flat
}

// gradBytes is the size in bytes of each of flat's float32 gradients: what the cutting
// functions below take.
func gradBytes(flat []*nn.Param) []int {
	sizes := make([]int, len(flat))
	for i, p := range flat {
		sizes[i] = 4 * p.Numel()
	}
	return sizes
}

// sizeCuts cuts gradients of sizes bytes, in buffer order, into buckets by size as PyTorch
// does: gradients are added to the current bucket until it holds at least limit bytes (first
// for the first bucket, then capBytes); then the tail gets a bucket of about last bytes
// (tailCut). A cut i means a bucket starts at the i-th gradient. DDP cuts its parameters
// (gradBytes) with it, and a Solver its float32 and its float64 learnables.
func sizeCuts(sizes []int, first, capBytes, last int) (cuts []int) {
	defer func() { cuts = tailCut(sizes, nil, cuts, last) }()
	bytes, limit := 0, first
	for i, n := range sizes {
		bytes += n
		if bytes >= limit && i+1 < len(sizes) {
			cuts = append(cuts, i+1)
			bytes, limit = 0, capBytes
		}
	}
	return cuts
}

// arrivalCuts re-cuts gradients of sizes bytes (in buffer order) from the order they arrived
// in (arrived lists buffer positions, first arrival first; positions never seen count as
// arriving last, in buffer order). A bucket is closed once it holds at least its limit and
// the cut falls on a closure point (every gradient before it arrived before every gradient
// after it); without a closure point within twice the limit it is cut by size alone.
func arrivalCuts(sizes []int, arrived []int, first, capBytes, last int) (cuts []int) {
	n := len(sizes)
	rank := make([]int, n)
	for i := range rank {
		rank[i] = -1
	}
	next := 0
	for _, pos := range arrived {
		if pos >= 0 && pos < n && rank[pos] < 0 {
			rank[pos] = next
			next++
		}
	}
	for i := range rank {
		if rank[i] < 0 {
			rank[i] = next
			next++
		}
	}
	defer func() { cuts = tailCut(sizes, rank, cuts, last) }()
	bytes, limit, prefixMax := 0, first, -1
	for i, size := range sizes {
		bytes += size
		prefixMax = max(prefixMax, rank[i])
		if i+1 >= n || bytes < limit {
			continue
		}
		if prefixMax == i || bytes >= 2*limit {
			cuts = append(cuts, i+1)
			bytes, limit = 0, capBytes
		}
	}
	return cuts
}

// tailCut adds a cut that gives the gradients arriving last a bucket of about last bytes
// (see LastBucketBytes); sizes are the gradients' bytes in buffer order, rank each buffer
// position's arrival rank (nil: buffer order). The cut is the first position from the end at
// which at least last bytes are collected and the suffix arrived after the prefix, or where
// 2·last bytes are collected; it is added only when it falls after the last cut, so that it
// splits the last bucket.
func tailCut(sizes []int, rank []int, cuts []int, last int) []int {
	n := len(sizes)
	if last <= 0 || n < 2 {
		return cuts
	}
	r := func(i int) int {
		if rank == nil {
			return i
		}
		return rank[i]
	}
	prefixMax := make([]int, n) // prefixMax[i]: latest arrival among flat[:i]
	m := -1
	for i := range n {
		prefixMax[i] = m
		m = max(m, r(i))
	}
	lastCut := 0
	if len(cuts) > 0 {
		lastCut = cuts[len(cuts)-1]
	}
	bytes, suffixMin := 0, n
	for i := n - 1; i > lastCut; i-- {
		bytes += sizes[i]
		suffixMin = min(suffixMin, r(i))
		if bytes >= last && (prefixMax[i] < suffixMin || bytes >= 2*last) {
			return append(cuts, i)
		}
	}
	return cuts
}

// layout builds the buckets for cuts over flat.
func layout(flat []*nn.Param, grad []float32, cuts []int) ([]*Bucket, []int) {
	byParam := make([]int, len(flat))
	var out []*Bucket
	start := 0
	bounds := append(slices.Clone(cuts), len(flat))
	for _, end := range bounds {
		if end <= start {
			continue
		}
		b := &Bucket{Index: len(out), Lo: flat[start].Offset, Params: slices.Clone(flat[start:end])}
		last := flat[end-1]
		b.Hi = last.Offset + last.Numel()
		b.Grad = grad[b.Lo:b.Hi:b.Hi]
		for _, p := range b.Params {
			byParam[p.Index] = b.Index
		}
		out = append(out, b)
		start = end
	}
	return out, byParam
}

// shareCuts broadcasts rank 0's cuts (nil on rank 0 means keep the current buckets) and
// returns them on every rank, with keep reporting rank 0's choice to keep.
func shareCuts(ctx context.Context, g comm.Group, nParams int, cuts []int, keep bool) ([]int, bool, error) {
	buf := make([]int64, nParams+1)
	if g.Rank() == 0 {
		if keep {
			buf[0] = -1
		} else {
			buf[0] = int64(len(cuts))
			for i, c := range cuts {
				buf[1+i] = int64(c)
			}
		}
	}
	if err := g.Broadcast(comm.I64(buf), 0).Wait(ctx); err != nil {
		return nil, false, fmt.Errorf("broadcast of the rebuilt buckets: %w", err)
	}
	if buf[0] < 0 {
		return nil, true, nil
	}
	if int(buf[0]) > nParams {
		return nil, false, fmt.Errorf("rank 0 sent %d bucket cuts for %d parameters", buf[0], nParams)
	}
	out := make([]int, buf[0])
	for i := range out {
		out[i] = int(buf[1+i])
	}
	return out, false, nil
}
