package comm

// ring runs steps t0..t1 of the pipelined ring over count elements split into n segments
// (ShardRange). At step t a rank sends segment r-t-1 to its right neighbour and receives
// segment r-t-2 from its left; steps 0..n-2 are the reduce-scatter half (the receiver reduces
// what it gets with its own data), steps n-1..2n-3 the all-gather half (it stores it).
//
// Each segment is split into one part per stream, and each part into chunks of
// cfg.chunkBytes. Every stream has a sender and a receiver goroutine; the sender forwards
// chunk j of step t as soon as the receiver has finished chunk j of step t-1 (a token), so
// receiving, reducing and sending overlap. The reduction order of every element depends only
// on n, which makes results deterministic.
//
// sendFrom(t) is the full-size byte buffer segments are sent from at step t. recvInto(t)
// returns the buffer received segments go to and the global byte offset of its first byte.
// reduceWith(t), when non-nil, is the full-size buffer whose segment is combined with the
// received one: out = received op own.
func (g *group) ring(h *Header, dt DType, op Op, count, t0, t1 int,
	sendFrom func(t int) []byte, recvInto func(t int) ([]byte, int), reduceWith func(t int) []byte) error {
	n, r, k := g.size, g.rank, g.t.Streams()
	es := dt.Size()
	chunk := max(1, g.cfg.chunkBytes/es) * es
	right, left := mod(r+1, n), mod(r-1, n)
	// part returns the byte range of stream s's part of segment seg.
	part := func(seg, s int) (int, int) {
		lo, hi := g.segRange(count, n, seg)
		plo, phi := ShardRange(hi-lo, k, s)
		return (lo + plo) * es, (lo + phi) * es
	}
	// chunks is the number of frames a part is sent as (at least one, so that every step
	// carries a header and ranks that disagree are caught).
	chunks := func(lo, hi int) int { return max(1, (hi-lo+chunk-1)/chunk) }
	maxSeg := (count + n - 1) / n
	if g.segs != nil {
		maxSeg = 0
		for seg := range n {
			lo, hi := g.segs(seg)
			maxSeg = max(maxSeg, hi-lo)
		}
	}
	maxChunks := chunks(0, (maxSeg+k-1)/k*es)
	steps := t1 - t0 + 1

	fns := make([]func() error, 0, 2*k)
	for s := range k {
		tokens := make(chan struct{}, steps*maxChunks+1)
		tmp := g.tmpBytes(s, min(chunk, maxChunks*chunk))
		fns = append(fns, func() error { // receiver
			for t := t0; t <= t1; t++ {
				lo, hi := part(mod(r-t-2, n), s)
				out, base := recvInto(t)
				red := reduceWith(t)
				for c, i := lo, 0; i < chunks(lo, hi); c, i = c+chunk, i+1 {
					e := min(c+chunk, hi)
					if red == nil {
						if err := g.recv(left, s, h, out[c-base:e-base]); err != nil {
							return err
						}
					} else if err := g.recvReduce(left, s, h, dt, op, out[c-base:e-base], red[c:e], tmp); err != nil {
						return err
					}
					if t < t1 {
						tokens <- struct{}{}
					}
				}
			}
			return nil
		}, func() error { // sender
			for t := t0; t <= t1; t++ {
				lo, hi := part(mod(r-t-1, n), s)
				src := sendFrom(t)
				for c, i := lo, 0; i < chunks(lo, hi); c, i = c+chunk, i+1 {
					e := min(c+chunk, hi)
					if t > t0 {
						select {
						case <-tokens:
						case <-g.dead:
							return g.failure()
						}
					}
					if err := g.send(right, s, h, src[c:e]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	return g.parallel(fns...)
}

// segRange is segment seg of count elements: g.segs's when set, else ShardRange's.
func (g *group) segRange(count, n, seg int) (lo, hi int) {
	if g.segs != nil {
		return g.segs(seg)
	}
	return ShardRange(count, n, seg)
}

// chainBroadcast pipelines root's buffer along the ring root -> root+1 -> ... -> root-1 in
// chunks over every stream: each rank forwards a chunk as soon as it has received it.
func (g *group) chainBroadcast(h *Header, root int, b []byte) error {
	n, r, k := g.size, g.rank, g.t.Streams()
	pos := mod(r-root, n)
	right, left := mod(r+1, n), mod(r-1, n)
	chunk := g.cfg.chunkBytes
	fns := make([]func() error, 0, 2*k)
	for s := range k {
		lo, hi := ShardRange(len(b), k, s)
		nc := max(1, (hi-lo+chunk-1)/chunk)
		tokens := make(chan struct{}, nc)
		if pos > 0 {
			fns = append(fns, func() error {
				for c, i := lo, 0; i < nc; c, i = c+chunk, i+1 {
					if err := g.recv(left, s, h, b[c:min(c+chunk, hi)]); err != nil {
						return err
					}
					tokens <- struct{}{}
				}
				return nil
			})
		}
		if pos < n-1 {
			fns = append(fns, func() error {
				for c, i := lo, 0; i < nc; c, i = c+chunk, i+1 {
					if pos > 0 {
						select {
						case <-tokens:
						case <-g.dead:
							return g.failure()
						}
					}
					if err := g.send(right, s, h, b[c:min(c+chunk, hi)]); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	return g.parallel(fns...)
}
