package trainer

import (
	"context"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// evaluate runs the validation set, each rank its share, and returns the mean loss and the
// top-1 and top-5 accuracy (percent) over all ranks. With collective set (ZeRO-3, whose
// forward gathers parameters) every rank runs as many batches as the rank with the most,
// repeating its last batch without counting it.
func evaluate(ctx context.Context, g comm.Group, val *Split, eng engine, classes int, collective bool) (loss, top1, top5 float64, err error) {
	var sums [4]float64 // loss sum, top-1 hits, top-5 hits, images
	most := []float64{float64(val.Steps)}
	if collective {
		if err := g.AllReduce(comm.F64(most), comm.Max).Wait(ctx); err != nil {
			return 0, 0, 0, fmt.Errorf("trainer: evaluation batch count: %w", err)
		}
	}
	ran := 0
	var last *data.Batch
	for b, err := range val.Batches(ctx, 0, 0) {
		if err != nil {
			return 0, 0, 0, err
		}
		logits, err := eng.evalLogits(ctx, b)
		if err != nil {
			return 0, 0, 0, err
		}
		ran++
		if collective { // the loader reuses batch memory: keep a copy to pad with
			last = &data.Batch{Images: append(last0(last).Images[:0], b.Images[:b.N*b.C*b.H*b.W]...),
				Labels: append(last0(last).Labels[:0], b.Labels[:b.N]...), N: b.N, C: b.C, H: b.H, W: b.W}
		}
		for i := 0; i < b.N; i++ {
			row := logits[i*classes : (i+1)*classes]
			y := int(b.Labels[i])
			l, r := logSoftmaxAt(row, y), rankOf(row, y)
			sums[0] -= l
			if r == 0 {
				sums[1]++
			}
			if r < 5 {
				sums[2]++
			}
			sums[3]++
		}
	}
	if collective {
		if last == nil && ran < int(most[0]) {
			return 0, 0, 0, fmt.Errorf("trainer: rank %d has no validation images to pad its %d missing batches with", g.Rank(), int(most[0]))
		}
		for ; ran < int(most[0]); ran++ {
			if _, err := eng.evalLogits(ctx, last); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	buf := sums[:]
	if err := g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("trainer: evaluation all-reduce: %w", err)
	}
	if buf[3] == 0 {
		return 0, 0, 0, fmt.Errorf("trainer: the validation set is empty")
	}
	return buf[0] / buf[3], 100 * buf[1] / buf[3], 100 * buf[2] / buf[3], nil
}

func last0(b *data.Batch) *data.Batch {
	if b == nil {
		return &data.Batch{}
	}
	return b
}

// logSoftmaxAt is log softmax(row)[y], computed stably in float64.
func logSoftmaxAt(row []float32, y int) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	return float64(row[y]) - m - math.Log(s)
}

// rankOf is the number of classes scored strictly higher than class y (ties go to the
// lower class). A NaN score of y ranks behind every class: a diverged model hits nothing.
func rankOf(row []float32, y int) int {
	if math.IsNaN(float64(row[y])) {
		return math.MaxInt
	}
	r := 0
	for k, v := range row {
		if v > row[y] || v == row[y] && k < y {
			r++
		}
	}
	return r
}
