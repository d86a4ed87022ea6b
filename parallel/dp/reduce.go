package dp

import "sync"

// minReduceChunk is the smallest range of the flat buffer worth a goroutine.
const minReduceChunk = 1 << 15

// reduceInto adds Σ_i ws[i]·bufs[i] to dst. The buffer is split into contiguous ranges, one
// per worker; each element is summed in replica order, so the result is the same for any
// number of workers.
func reduceInto(dst []float32, bufs [][]float32, ws []float32, workers int) {
	n := len(dst)
	w := max(1, min(workers, n/minReduceChunk))
	chunk := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			reduceRange(dst[lo:hi], bufs, ws, lo, hi)
		}()
	}
	wg.Wait()
}

func reduceRange(dst []float32, bufs [][]float32, ws []float32, lo, hi int) {
	switch len(bufs) {
	case 1:
		a, wa := bufs[0][lo:hi], ws[0]
		for k := range dst {
			dst[k] += wa * a[k]
		}
	case 2:
		a, b, wa, wb := bufs[0][lo:hi], bufs[1][lo:hi], ws[0], ws[1]
		for k := range dst {
			dst[k] += wa*a[k] + wb*b[k]
		}
	default:
		for k := range dst {
			var s float32
			for i, buf := range bufs {
				s += ws[i] * buf[lo+k]
			}
			dst[k] += s
		}
	}
}
