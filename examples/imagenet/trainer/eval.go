package trainer

import (
	"context"
	"fmt"
	"math"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// evaluate runs the validation set, each rank its share, and returns the mean loss and the
// top-1 and top-5 accuracy (percent) over all ranks.
func evaluate(ctx context.Context, g comm.Group, val *split, prog func(n int) (*ddp.Program, error), classes int) (loss, top1, top5 float64, err error) {
	var sums [4]float64 // loss sum, top-1 hits, top-5 hits, images
	for b, err := range val.batches(ctx, 0, 0) {
		if err != nil {
			return 0, 0, 0, err
		}
		p, err := prog(b.N)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := fill(p.Program, b); err != nil {
			return 0, 0, 0, err
		}
		if err := p.Run(ctx); err != nil {
			return 0, 0, 0, err
		}
		logits, err := p.Output("logits")
		if err != nil {
			return 0, 0, 0, err
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
	buf := sums[:]
	if err := g.AllReduce(comm.F64(buf), comm.Sum).Wait(ctx); err != nil {
		return 0, 0, 0, fmt.Errorf("trainer: evaluation all-reduce: %w", err)
	}
	if buf[3] == 0 {
		return 0, 0, 0, fmt.Errorf("trainer: the validation set is empty")
	}
	return buf[0] / buf[3], 100 * buf[1] / buf[3], 100 * buf[2] / buf[3], nil
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

// rankOf is the number of classes scored strictly higher than class y.
func rankOf(row []float32, y int) int {
	r := 0
	for k, v := range row {
		if v > row[y] || v == row[y] && k < y {
			r++
		}
	}
	return r
}
