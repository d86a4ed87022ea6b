package commhook

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/gorgonia-parallel/gp/internal/simd"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// PowerSGDOption configures PowerSGD.
type PowerSGDOption func(*powerSGDConfig)

type powerSGDConfig struct {
	rank          int
	startIter     int
	minRate       float64
	errorFeedback bool
	warmStart     bool
	eps           float32
	seed          uint64
}

// PowerSGDRank sets matrix_approximation_rank r (default 1): each gradient matrix n×m is sent
// as P (n×r) and Q (m×r), (n+m)·r numbers instead of n·m.
func PowerSGDRank(r int) PowerSGDOption { return func(c *powerSGDConfig) { c.rank = r } }

// PowerSGDStartIter sets start_powerSGD_iter (default 1000): steps before it are reduced by a
// plain all-reduce (the average), as torch does to let training settle first.
func PowerSGDStartIter(n int) PowerSGDOption { return func(c *powerSGDConfig) { c.startIter = n } }

// PowerSGDMinCompressionRate sets min_compression_rate (default 2): an n×m gradient is
// compressed only when n·m > rate·(n+m)·r; smaller ones, and every gradient of at most one
// dimension (biases, norms), are all-reduced uncompressed, together.
func PowerSGDMinCompressionRate(rate float64) PowerSGDOption {
	return func(c *powerSGDConfig) { c.minRate = rate }
}

// PowerSGDErrorFeedback sets use_error_feedback (default true): what compression lost at a
// step is added to the rank's gradients at the next one.
func PowerSGDErrorFeedback(on bool) PowerSGDOption {
	return func(c *powerSGDConfig) { c.errorFeedback = on }
}

// PowerSGDWarmStart sets warm_start (default true): each step's Q starts from the previous
// step's (orthogonalized) instead of fresh random values.
func PowerSGDWarmStart(on bool) PowerSGDOption { return func(c *powerSGDConfig) { c.warmStart = on } }

// PowerSGDSeed sets random_seed (default 0), the seed of the random Qs; it must be the same on
// every rank.
func PowerSGDSeed(seed uint64) PowerSGDOption { return func(c *powerSGDConfig) { c.seed = seed } }

// PowerSGDOrthogonalizationEpsilon sets orthogonalization_epsilon (default 0), added to each
// column's norm before dividing by it in Gram-Schmidt.
func PowerSGDOrthogonalizationEpsilon(eps float32) PowerSGDOption {
	return func(c *powerSGDConfig) { c.eps = eps }
}

// PowerSGD returns PyTorch's powerSGD_hook (torch.distributed.algorithms.ddp_comm_hooks,
// Vogels et al., "PowerSGD: Practical Low-Rank Gradient Compression", 2019): rank-r
// compression of each bucket's gradient matrices with one step of power iteration.
//
// Per bucket and step, from start_powerSGD_iter on: the previous step's error is added to the
// bucket (error feedback); each gradient of two or more dimensions worth compressing is
// viewed as a matrix M of shape[0] rows (the other dimensions flattened, as torch does); the
// other gradients are all-reduced uncompressed and averaged. Then P = M·Q, all-reduce the Ps
// (sum), orthogonalize each P (Gram-Schmidt), Q = Mᵀ·P, all-reduce the Qs and divide them by
// the world size, M ≈ P·Qᵀ, and the error is what the bucket held before less what it holds
// now. The first Q of a bucket (every Q without warm start) is random normal from a generator
// seeded with the seed, orthogonalized, identical on every rank.
//
// The hook keeps state per group (one hook may serve several ranks of a process) and per
// bucket index; a bucket whose extent changes (DDP re-cuts its buckets after the first step)
// starts afresh, as torch's does when a bucket's size changes. A step is recognised by its first bucket (Index 0). The reductions of a
// group's buckets run one after the other, in bucket order, on goroutines of their own, so
// every rank issues the same collectives in the same order. P and Q travel as float32.
//
// Like torch, it refuses start_powerSGD_iter <= 1 with error feedback or warm start (DDP may
// re-cut its buckets after the first step, which would waste the state), and a rank below 1.
func PowerSGD(opts ...PowerSGDOption) (ddp.CommHook, error) {
	c := powerSGDConfig{rank: 1, startIter: 1000, minRate: 2, errorFeedback: true, warmStart: true}
	for _, o := range opts {
		o(&c)
	}
	if c.rank < 1 {
		return nil, fmt.Errorf("commhook: PowerSGD rank %d: %w", c.rank, comm.ErrInvalid)
	}
	if (c.errorFeedback || c.warmStart) && c.startIter <= 1 {
		return nil, fmt.Errorf("commhook: PowerSGD start iteration %d: must be > 1 with error feedback or warm start (as torch): %w",
			c.startIter, comm.ErrInvalid)
	}
	return &powerSGD{cfg: c, groups: map[comm.Group]*psgdGroup{}}, nil
}

type powerSGD struct {
	cfg    powerSGDConfig
	mu     sync.Mutex
	groups map[comm.Group]*psgdGroup
}

// psgdGroup is one rank's state. It is touched by Reduce (on the backward goroutine) and by
// the bucket goroutines, which run one at a time, each after the previous one has finished.
type psgdGroup struct {
	iter      int
	lastIndex int
	rng       *rand.Rand
	buckets   map[int]*psgdBucket
	tail      chan struct{} // closed when the last launched bucket has finished
}

// psgdBucket is the state of one bucket index.
type psgdBucket struct {
	size   int
	lo     int       // the bucket's Lo, and
	first  *nn.Param // its first parameter, when the layout was made
	mats   []psgdMatrix
	unc    [][2]int // uncompressed element ranges of the bucket
	uncBuf []float32
	p, q   []float32 // every matrix's P and Q, one after the other
	qt     []float32 // lowRank's scratch
	err    []float32 // error feedback
	before []float32 // the bucket after the error was added
	qReady bool      // q holds a previous step's Q (warm start)
}

// psgdMatrix is one compressed gradient: rows×cols at off in the bucket, rank r, its P at
// pOff and its Q at qOff.
type psgdMatrix struct {
	off, rows, cols, r, pOff, qOff int
}

func (h *powerSGD) group(g comm.Group) *psgdGroup {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.groups[g]
	if st == nil {
		tail := make(chan struct{})
		close(tail)
		st = &psgdGroup{lastIndex: -1, rng: seedSource(h.cfg.seed),
			buckets: map[int]*psgdBucket{}, tail: tail}
		h.groups[g] = st
	}
	return st
}

func (h *powerSGD) Reduce(g comm.Group, b *ddp.Bucket) comm.Work {
	st := h.group(g)
	if b.Index <= st.lastIndex {
		st.iter++
	}
	st.lastIndex = b.Index
	if st.iter < h.cfg.startIter {
		return ddp.AllReduceHook().Reduce(g, b)
	}
	prev := st.tail
	w := chain(func(w *chainWork) error {
		<-prev
		if err := h.compress(g, st, b, w); err != nil {
			return fmt.Errorf("PowerSGD %v: %w", b, err)
		}
		return nil
	})
	st.tail = w.done
	return w
}

// compress runs the algorithm on one bucket (see PowerSGD).
func (h *powerSGD) compress(g comm.Group, st *psgdGroup, b *ddp.Bucket, w *chainWork) error {
	n := g.Size()
	bs := st.buckets[b.Index]
	if bs == nil || bs.size != len(b.Grad) || bs.lo != b.Lo || len(b.Params) > 0 && bs.first != b.Params[0] {
		bs = h.layout(b)
		st.buckets[b.Index] = bs
	}
	grad := b.Grad
	if h.cfg.errorFeedback {
		simd.AddTo(grad, bs.err)
		copy(bs.before, grad)
	}
	if !h.cfg.warmStart || !bs.qReady {
		randomNormal(st.rng, bs.q)
		bs.qReady = true
	}
	for _, m := range bs.mats {
		orthogonalize(bs.q[m.qOff:m.qOff+m.cols*m.r], m.cols, m.r, h.cfg.eps)
	}
	k := 0
	for _, u := range bs.unc {
		k += copy(bs.uncBuf[k:], grad[u[0]:u[1]])
	}
	var uw comm.Work
	if len(bs.uncBuf) > 0 {
		uw = w.track(g.AllReduce(comm.F32(bs.uncBuf), comm.Sum))
	}
	for _, m := range bs.mats {
		mulQ(bs.p[m.pOff:], grad[m.off:], bs.q[m.qOff:], bs.qt, m.rows, m.cols, m.r)
	}
	pw := w.track(g.AllReduce(comm.F32(bs.p), comm.Sum))
	if uw != nil {
		if err := uw.Wait(context.Background()); err != nil {
			return fmt.Errorf("all-reduce of the uncompressed gradients: %w", err)
		}
		ddp.DivideByWorld(bs.uncBuf, n)
		k = 0
		for _, u := range bs.unc {
			k += copy(grad[u[0]:u[1]], bs.uncBuf[k:])
		}
	}
	if err := pw.Wait(context.Background()); err != nil {
		return fmt.Errorf("all-reduce of P: %w", err)
	}
	for _, m := range bs.mats {
		orthogonalize(bs.p[m.pOff:m.pOff+m.rows*m.r], m.rows, m.r, h.cfg.eps)
		mulTP(bs.q[m.qOff:], grad[m.off:], bs.p[m.pOff:], bs.qt, m.rows, m.cols, m.r)
	}
	if err := w.track(g.AllReduce(comm.F32(bs.q), comm.Sum)).Wait(context.Background()); err != nil {
		return fmt.Errorf("all-reduce of Q: %w", err)
	}
	ddp.DivideByWorld(bs.q, n)
	for _, m := range bs.mats {
		lowRank(grad[m.off:m.off+m.rows*m.cols], bs.p[m.pOff:], bs.q[m.qOff:], bs.qt, m.rows, m.cols, m.r)
	}
	if h.cfg.errorFeedback {
		for i := range bs.err {
			bs.err[i] = bs.before[i] - grad[i]
		}
	}
	return nil
}

// layout decides which of b's gradients are compressed and allocates the bucket's state.
func (h *powerSGD) layout(b *ddp.Bucket) *psgdBucket {
	bs := &psgdBucket{size: len(b.Grad), lo: b.Lo}
	if len(b.Params) > 0 {
		bs.first = b.Params[0]
	}
	covered := 0 // elements before it are assigned
	addUnc := func(lo, hi int) {
		if hi <= lo {
			return
		}
		if k := len(bs.unc); k > 0 && bs.unc[k-1][1] == lo {
			bs.unc[k-1][1] = hi
			return
		}
		bs.unc = append(bs.unc, [2]int{lo, hi})
	}
	np, nq := 0, 0
	for _, p := range b.Params {
		off := p.Offset - b.Lo
		if off < covered || off+p.Numel() > len(b.Grad) {
			continue // not wholly in the bucket: left to the uncompressed ranges
		}
		addUnc(covered, off)
		covered = off + p.Numel()
		rows := 0
		if len(p.Shape) >= 2 && p.Shape[0] > 0 {
			rows = p.Shape[0]
		}
		if rows == 0 {
			addUnc(off, covered)
			continue
		}
		cols := p.Numel() / rows
		r := min(rows, cols, h.cfg.rank)
		if !(float64((rows+cols)*r)*h.cfg.minRate < float64(rows*cols)) {
			addUnc(off, covered)
			continue
		}
		bs.mats = append(bs.mats, psgdMatrix{off: off, rows: rows, cols: cols, r: r, pOff: np, qOff: nq})
		np += rows * r
		nq += cols * r
	}
	addUnc(covered, len(b.Grad))
	k := 0
	for _, u := range bs.unc {
		k += u[1] - u[0]
	}
	bs.uncBuf = make([]float32, k)
	bs.p, bs.q, bs.qt = make([]float32, np), make([]float32, nq), make([]float32, nq)
	if h.cfg.errorFeedback {
		bs.err, bs.before = make([]float32, len(b.Grad)), make([]float32, len(b.Grad))
	}
	return bs
}

// seedSource is the generator of the per-bucket seeds (torch's state.rng).
func seedSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randomNormal fills q with standard normal values from a generator seeded by the next seed
// of src: one seed per bucket and step, drawn in bucket order, so the same on every rank.
func randomNormal(src *rand.Rand, q []float32) {
	r := rand.New(rand.NewPCG(src.Uint64(), 0))
	for i := range q {
		q[i] = float32(r.NormFloat64())
	}
}

// Note [PowerSGD products]
// M·Q and Mᵀ·P multiply a large matrix by one of r <= a few columns: one pass over M is all
// they need, and that pass is the cost. A BLAS GEMM first packs M into its own layout (a copy
// of the whole gradient per product, which measured as most of the hook's time through
// OpenBLAS), so these are streaming loops: mulQ takes r dot products per row of M, mulTP adds
// r multiples of each row into Qᵀ (r rows of cols, which stay in cache).

// mulQ sets p (rows×r) to m·q, m rows×cols and q cols×r, all row-major; qt (cols·r) is
// scratch.
func mulQ(p, m, q, qt []float32, rows, cols, r int) {
	transpose(qt, q, cols, r)
	for i := range rows {
		row := m[i*cols : (i+1)*cols : (i+1)*cols]
		for k := range r {
			p[i*r+k] = dot(row, qt[k*cols:(k+1)*cols:(k+1)*cols])
		}
	}
}

// mulTP sets q (cols×r) to mᵀ·p, m rows×cols and p rows×r, all row-major; qt (cols·r) is
// scratch.
func mulTP(q, m, p, qt []float32, rows, cols, r int) {
	qt = qt[:cols*r]
	clear(qt)
	for i := range rows {
		row := m[i*cols : (i+1)*cols : (i+1)*cols]
		for k := range r {
			axpy(qt[k*cols:(k+1)*cols:(k+1)*cols], p[i*r+k], row)
		}
	}
	transpose(q, qt, r, cols)
}

// transpose sets dst (cols×rows) to src (rows×cols)ᵀ, both row-major.
func transpose(dst, src []float32, rows, cols int) {
	for i := range rows {
		for j := range cols {
			dst[j*rows+i] = src[i*cols+j]
		}
	}
}

// dot is Σ x[i]·y[i] in float32, in four interleaved partial sums.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy sets y[i] += a·x[i].
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

// orthogonalize makes the r columns of the rows×r row-major matrix x orthonormal by
// Gram-Schmidt, as torch's _orthogonalize_gram_schmidt: each column is divided by its norm
// (plus eps), then its projection is taken off the columns after it. Norms and dot products
// are summed in float64. A column of norm zero (eps 0) is left zero, where torch would divide
// by zero.
func orthogonalize(x []float32, rows, r int, eps float32) {
	for i := range r {
		var ss float64
		for k := range rows {
			v := float64(x[k*r+i])
			ss += v * v
		}
		d := float32(math.Sqrt(ss)) + eps
		if d == 0 {
			continue
		}
		for k := range rows {
			x[k*r+i] /= d
		}
		for j := i + 1; j < r; j++ {
			var dot float64
			for k := range rows {
				dot += float64(x[k*r+i]) * float64(x[k*r+j])
			}
			c := float32(dot)
			for k := range rows {
				x[k*r+j] -= c * x[k*r+i]
			}
		}
	}
}

// lowRank sets m (rows×cols) to p·qᵀ, p rows×r and q cols×r, each element's r products
// summed in order k = 0..r-1 (plain Go: the same bits on every rank, which BLAS does not
// promise). qt (cols·r) is scratch: q transposed, so that every row is r passes over
// contiguous memory.
func lowRank(m, p, q, qt []float32, rows, cols, r int) {
	for j := range cols {
		for k := range r {
			qt[k*cols+j] = q[j*r+k]
		}
	}
	for i := range rows {
		row, pi := m[i*cols:(i+1)*cols:(i+1)*cols], p[i*r:(i+1)*r]
		s, q0 := pi[0], qt[:cols:cols]
		for j := range row {
			row[j] = s * q0[j]
		}
		for k := 1; k < r; k++ {
			s, qk := pi[k], qt[k*cols:(k+1)*cols:(k+1)*cols]
			for j := range row {
				row[j] += s * qk[j]
			}
		}
	}
}
