package swin

import (
	"fmt"
	"hash"
	"math"
	"sync"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// float is the element type of this package's ops: float32 to train, float64 for gradcheck.
type float interface{ ~float32 | ~float64 }

// opBase holds what every op of this package shares: a unique id (ops carry per-graph state
// and must never be merged by gorgonia's deduplication) and a name for errors.
type opBase struct {
	id   int64
	name string
}

func newOpBase(name string) opBase { return opBase{id: ops.NextID(), name: name} }

func (b opBase) ReturnsPtr() bool      { return false }
func (b opBase) CallsExtern() bool     { return false }
func (b opBase) OverwritesInput() int  { return -1 }
func (b opBase) WriteHash(h hash.Hash) { fmt.Fprintf(h, "swin.%s#%d", b.name, b.id) }
func (b opBase) Hashcode() uint32      { return ops.HashOf(b) }
func (b opBase) String() string        { return fmt.Sprintf("%s#%d", b.name, b.id) }

// fnType is the gorgonia function type from input ranks to the output rank.
func fnType(out int, in ...int) hm.Type {
	a := hm.TypeVariable('a')
	ts := make([]hm.Type, 0, len(in)+1)
	for _, d := range append(in, out) {
		ts = append(ts, G.TensorType{Dims: d, Of: a})
	}
	return hm.NewFnType(ts...)
}

// dense returns v as a float32 or float64 dense tensor of the given size, or an error
// naming the op and what was wrong.
func dense(op, what string, v G.Value, size int) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%s: %s: expected a dense tensor, got %T", op, what, v)
	}
	if dt := d.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, fmt.Errorf("%s: %s: unsupported dtype %v (want float32 or float64)", op, what, dt)
	}
	if size >= 0 && d.Shape().TotalSize() != size {
		return nil, fmt.Errorf("%s: %s has shape %v, want %d elements", op, what, d.Shape(), size)
	}
	return d, nil
}

// outBuf is an output tensor owned by an op and reused across runs (the tape runs each op
// once per run, and consumers read it before the next run).
type outBuf struct{ t *tensor.Dense }

func (o *outBuf) get(dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	if o.t == nil || o.t.Dtype() != dt || !o.t.Shape().Eq(shape) {
		o.t = tensor.New(tensor.Of(dt), tensor.WithShape(shape...))
	}
	return o.t
}

func data[T float](d *tensor.Dense) []T { return d.Data().([]T) }

// gemm is c = alpha*op(a)*op(b) + beta*c, row-major, through gonum's registered BLAS
// (OpenBLAS with cgo, see internal/blasimpl).
func gemm[T float](tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	switch av := any(a).(type) {
	case []float32:
		if beta == 0 && simd.SmallGemm32(tA, tB, m, n, k, float32(alpha), av, lda, any(b).([]float32), ldb, any(c).([]float32), ldc) {
			return
		}
		blas32.Implementation().Sgemm(ta, tb, m, n, k, float32(alpha), av, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		blas64.Implementation().Dgemm(ta, tb, m, n, k, float64(alpha), av, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// parallel runs f(worker, lo, hi) over [0, n) split into at most ops.Threads() contiguous
// chunks, on ops.ForkJoin's workers; worker numbers are below the returned count of workers
// used.
func parallel(n int, f func(worker, lo, hi int)) int {
	w := min(maxWorkers(), n)
	if w <= 1 {
		if n > 0 {
			f(0, 0, n)
		}
		return 1
	}
	ops.ForkJoin(w, func(i int) { f(i, i*n/w, (i+1)*n/w) })
	return w
}

var maxWorkers = sync.OnceValue(ops.Threads)

func float64Sqrt(n int) float64 { return math.Sqrt(float64(n)) }
