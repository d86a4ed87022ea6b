package ddp

import (
	"context"
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// Bucket is a contiguous range of the flat gradient buffer that is reduced as one
// collective. Its parameters are consecutive in the buffer: in reverse registration order
// for New, in the order Step is handed the learnables for NewSolver.
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
// functions of package bucketcut take.
func gradBytes(flat []*nn.Param) []int {
	sizes := make([]int, len(flat))
	for i, p := range flat {
		sizes[i] = 4 * p.Numel()
	}
	return sizes
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
