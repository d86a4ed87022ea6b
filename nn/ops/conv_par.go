package ops

import (
	"sync"
	"sync/atomic"

	blasthreads "github.com/gorgonia-parallel/gp/internal/blasimpl/threads"
)

// Convolutions split across Threads() themselves, rather than leaving it to a threaded
// BLAS: OpenBLAS's threads split each GEMM but leave im2col, col2im and the layout copies
// in between on one core, scale poorly on the skinny GEMMs of small feature maps, and spin
// on the other cores while Go code runs (measured on resnet18 at 64x64, 2 threads: 1.94
// cores busy for 1.3x the 1-thread speed). Here the per-image path gives each worker whole
// images (its own columns, its own GEMMs) and the batched path splits each GEMM into column
// or row blocks, with OpenBLAS held to one thread per call meanwhile. The workers are
// ForkJoin's pool (forkjoin.go).

// gemmGrain is the fewest multiply-adds (m*n*k) per goroutine worth splitting a GEMM for.
const gemmGrain = 1 << 20

// blasSerial counts the goroutines inside serialBLAS, so that overlapping sections (two
// graphs run from two goroutines) restore the BLAS's thread count once, when the last ends.
var blasSerial struct {
	sync.Mutex
	depth, prev int
}

// serialBLAS runs f with the BLAS at one thread per call, so that f's goroutines can each
// call it. Without cgo (gonum's BLAS) it just runs f.
func serialBLAS(f func()) {
	blasSerial.Lock()
	if blasSerial.depth == 0 {
		blasSerial.prev = blasthreads.Set(1)
	}
	blasSerial.depth++
	blasSerial.Unlock()
	defer func() {
		blasSerial.Lock()
		blasSerial.depth--
		if blasSerial.depth == 0 && blasSerial.prev > 1 {
			blasthreads.Set(blasSerial.prev)
		}
		blasSerial.Unlock()
	}()
	f()
}

// splitWorkers runs f(wi, lo, hi) for w contiguous chunks of [0, n), worker wi = 0 on the
// calling goroutine; chunk bounds are multiples of align except the last.
func splitWorkers(n, w, align int, f func(wi, lo, hi int)) {
	bound := func(i int) int {
		if i >= w {
			return n
		}
		return (i * n / w) / align * align
	}
	ForkJoin(w, func(i int) {
		if lo, hi := bound(i), bound(i+1); lo < hi || i == 0 {
			f(i, lo, hi)
		}
	})
}

// gemmPar is gemm split across Threads() goroutines when it is big enough: into column
// blocks of op(b) and c when n >= m, else into row blocks of op(a) and c. The BLAS always
// runs at one thread per call inside it.
func gemmPar[T Float](tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	w := min(threads(), m*n*k/gemmGrain)
	if n >= m {
		w = min(w, n/16)
	} else {
		w = min(w, m/16)
	}
	if w <= 1 {
		// Serial too: a call with the BLAS's threads wakes them, and OpenBLAS's idle threads
		// then spin (sched_yield) for a while against the goroutines of the ops that follow;
		// measured 10-12% more CPU per resnet18 step at 2 threads.
		serialBLAS(func() { gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) })
		return
	}
	serialBLAS(func() {
		if n >= m {
			splitWorkers(n, w, 16, func(_, lo, hi int) {
				bo := lo
				if tB {
					bo = lo * ldb
				}
				gemm(tA, tB, m, hi-lo, k, alpha, a, lda, b[bo:], ldb, beta, c[lo:], ldc)
			})
			return
		}
		splitWorkers(m, w, 16, func(_, lo, hi int) {
			ao := lo * lda
			if tA {
				ao = lo
			}
			gemm(tA, tB, hi-lo, n, k, alpha, a[ao:], lda, b, ldb, beta, c[lo*ldc:], ldc)
		})
	})
}

// convImageWorkers is the number of goroutines the per-image path splits a batch of n
// images across.
func convImageWorkers(n int) int { return max(1, min(threads(), n)) }

// workerBufs returns w buffers of n elements, one per worker, from list (grown as needed;
// call it before the workers start).
func workerBufs[T Float](list *[]gemmScratch, w, n int) [][]T {
	for len(*list) < w {
		*list = append(*list, gemmScratch{})
	}
	bufs := make([][]T, w)
	for i := range bufs {
		bufs[i] = gemmScratchOf[T](&(*list)[i], n)
	}
	return bufs
}

// convImages runs f over the images [0, n) of a per-image convolution path: on the calling
// goroutine with im2col and col2im split by channels (par) when there is one worker, else
// over whole images per worker with the BLAS serial. The split is static, so that a
// layer's filter gradient (each worker sums its images, then the workers' sums are added)
// is the same bits every run at a given thread count; dealing images as workers free up
// was measured no faster once ForkJoin's pool started them promptly. col is worker wi's
// column buffer (nil for directCols or without needCol).
func convImages[T Float](g *convGeom, sc *convScratch, n int, needCol bool, f func(wi, lo, hi int, col []T, par bool)) {
	w := convImageWorkers(n)
	var cols [][]T
	if !g.directCols && needCol {
		cols = workerBufs[T](&sc.cols, w, g.colRows()*g.OH*g.OW)
	} else {
		cols = make([][]T, w)
	}
	if w == 1 {
		f(0, 0, n, cols[0], true)
		return
	}
	if convIndexed(g) {
		sc.colIndex(g)
	}
	sc.shiftTable(g)
	serialBLAS(func() {
		splitWorkers(n, w, 1, func(wi, lo, hi int) { f(wi, lo, hi, cols[wi], false) })
	})
}

// convIm2colOne is im2col of one image for the per-image path (rows ld apart): split by
// channels when par.
func convIm2colOne[T Float](g *convGeom, sc *convScratch, x, col []T, ld int, par bool) {
	if par {
		convIm2col(g, sc, x, col, ld)
		return
	}
	convIm2colRange(g, sc, convIndexed(g), x, col, ld, 0, g.C)
}

// convCol2imOne is col2im of one image for the per-image path: split by channels when par.
func convCol2imOne[T Float](g *convGeom, sc *convScratch, col, dx []T, par bool) {
	if par {
		convCol2im(g, sc, col, dx, g.OH*g.OW)
		return
	}
	convCol2imRange(g, sc, convIndexed(g), col, dx, g.OH*g.OW, 0, g.C)
}

// splitWorkersOK is splitWorkers for a kernel that may refuse its part (a packing buffer it
// could not allocate, a level it lacks): it reports whether every part ran, so that the
// caller can do it all again another way.
func splitWorkersOK(n, w, align int, f func(lo, hi int) bool) bool {
	var failed atomic.Bool
	splitWorkers(n, w, align, func(_, lo, hi int) {
		if !f(lo, hi) {
			failed.Store(true)
		}
	})
	return !failed.Load()
}

// splitRowsOK is splitRows for a kernel that may refuse its part, as splitWorkersOK.
func splitRowsOK(n, rowLen int, f func(lo, hi int) bool) bool {
	var failed atomic.Bool
	splitRows(n, rowLen, func(lo, hi int) {
		if !f(lo, hi) {
			failed.Store(true)
		}
	})
	return !failed.Load()
}
