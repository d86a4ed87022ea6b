package comm

import (
	"context"
	"fmt"
)

// Note [Hierarchical collectives]
//
// A job whose ranks span several hosts, with several ranks on some host, runs its
// collectives in two levels, as gloo, NCCL and Horovod do: inside a host over shared memory,
// between hosts over TCP among one rank per host (the host's leader, its lowest rank), so
// that each host's data crosses the network once instead of once per rank:
//
//   - all-reduce: the leader reduces its host's buffers (up), the leaders all-reduce along a
//     ring (inter), the leader copies the result to its host's ranks (down);
//   - reduce-scatter: up as above; the leaders run the reduce-scatter half of the ring, with
//     segment h the union of host h's shards; the leader hands each of its ranks its shard;
//   - all-gather: the leader collects its ranks' shards, the leaders run the all-gather half
//     of the ring over the same segments, the leader copies the whole buffer down;
//   - broadcast: the root stands for its host, the leaders of the other hosts for theirs;
//     the chain (or, small, the direct) broadcast runs among them, then each copies down.
//
// The buffer is cut into pieces (hierPieceChunks chunks each) that flow through the three
// stages as a pipeline: while the leaders exchange piece j over the network, the leader
// already reduces piece j+1 out of shared memory and sends piece j-1 down. All-reduce's
// pieces are contiguous (the ring splits each among the hosts); reduce-scatter's and
// all-gather's piece j is the j-th slice of every host's range, so that every leader sends
// in every piece (contiguous pieces would keep one host's link idle while another's works). Inside a stage,
// frames are chunks (WithChunkBytes), so the shared-memory rings stream too. The network
// stage runs its pieces on lanes, one per TCP stream: piece j's ring runs on stream j mod k
// alone, the lanes concurrently, so that one lane's ring sends while another's waits for its
// reduction or for the stage before it (a ring per piece over all streams stops the link
// between pieces). When every host has one rank there is nothing to overlap: the buffer is
// one piece, and the leaders' ring runs over every stream, exactly as the flat ring would
// (and reduce-scatter sends from and adds the caller's buffer, without copying it first).
//
// Determinism: every element of a reduction is computed once, by one rank, in an order that
// depends only on the host layout: the leader adds its host's ranks in rank order, then the
// ring adds the hosts' sums in the ring's order; every other rank receives those bits. So
// all ranks end bit-identical, run after run, for a given layout and buffer length. (The
// bits may differ in the last place from the flat TCP or shared-memory sums, which add in
// other orders.)
//
// The ranks of a host must be contiguous (rank = node rank × ranks per node + local rank, as
// gprun, torchrun and SLURM's block distribution number them); otherwise InitFromEnv keeps
// the flat TCP group. Barrier and point-to-point messages use the flat TCP connections.

// hierPieceChunks is the pipeline's piece, in chunks: small enough that the three stages
// overlap on a 16 MiB buffer (4 pieces at the default 1 MiB chunk), large enough that the
// ring's 2(hosts-1) steps per piece stay cheap.
const hierPieceChunks = 4

// hierarchy is the state of a hierarchical group (see Note [Hierarchical collectives]).
type hierarchy struct {
	first  []int     // first[h]: the lowest rank of host h; first[hosts] = world size
	host   int       // this rank's host
	localT Transport // this host's ranks (shared memory), nil when alone on its host
	local  *group    // sub-group over localT
	view   *viewTransport
	inter  *group // sub-group over view: one rank per host, nil with one host
	// lanes[s] is the leaders' sub-group over stream s alone: the pipeline's inter stage
	// runs piece j on lane j mod len(lanes), so that one lane's ring sends while another's
	// waits for a reduction or the stage before it (see Note [Hierarchical collectives]).
	lanes   []*group
	leaders []int
	single  bool // every host has one rank: no pipeline, the leaders' ring runs on the whole buffer
}

// attachHier makes g run its collectives hierarchically over hosts first (see hierarchy),
// with local the transport among this host's ranks (nil when it is alone on its host).
func (g *group) attachHier(first []int, local Transport) {
	hr := &hierarchy{first: first, host: hostOf(first, g.rank), localT: local}
	for h := range len(first) - 1 {
		hr.leaders = append(hr.leaders, first[h])
	}
	if local != nil {
		lo := first[hr.host]
		ranks := make([]int, local.Size())
		for i := range ranks {
			ranks[i] = lo + i
		}
		hr.local = g.sub(local, ranks)
	}
	if len(hr.leaders) > 1 {
		hr.view = &viewTransport{t: g.t, rank: hr.host, ranks: hr.leaders}
		hr.inter = g.sub(hr.view.transport(), hr.leaders)
		for s := range g.t.Streams() {
			v := &viewTransport{t: g.t, rank: hr.host, ranks: hr.leaders, streams: []int{s}}
			hr.lanes = append(hr.lanes, g.sub(v.transport(), hr.leaders))
		}
	}
	hr.single = len(first)-1 == g.size
	g.hier = hr
}

// sub is a sub-group of g over t (ranks: t's ranks in g) that runs algorithms only: it has no
// queue, and its failures are g's.
func (g *group) sub(t Transport, ranks []int) *group {
	return &group{t: t, cfg: g.cfg, rank: t.Rank(), size: t.Size(), parent: g, dead: g.dead,
		tmp: make([][]byte, t.Streams()), ranks: ranks}
}

// hostOf is the host of rank r.
func hostOf(first []int, r int) int {
	for h := len(first) - 2; h > 0; h-- {
		if r >= first[h] {
			return h
		}
	}
	return 0
}

// run executes collective w hierarchically.
func (hr *hierarchy) run(g *group, w *work, h *Header) error {
	var err error
	switch w.kind {
	case kindAllReduce:
		err = hr.allReduce(g, h, w.buf.DType(), w.op, w.buf.Len(), w.buf.bytes())
		if err == nil && w.op == Avg {
			divide(w.buf, g.size)
		}
	case kindReduceScatter:
		err = hr.reduceScatter(g, h, w.src.DType(), w.op, w.src.Len(), w.buf.bytes(), w.src.bytes())
		if err == nil && w.op == Avg {
			divide(w.buf, g.size)
		}
	case kindAllGather:
		err = hr.allGather(g, h, w.buf.DType(), w.buf.Len(), w.buf.bytes(), w.src.bytes())
	case kindBroadcast:
		h.Root = uint16(w.root)
		err = hr.broadcast(g, h, w.root, w.buf.Len(), w.buf.DType().Size(), w.buf.bytes())
	default:
		err = fmt.Errorf("%w: %s has no hierarchical algorithm", ErrInvalid, w.kind)
	}
	return err
}

// pieces is the number of pipeline pieces of count elements of es bytes (at least one, so
// that every stage exchanges a header even for an empty buffer) and the elements per piece.
// With one rank on every host there is nothing to overlap the network with: one piece, so
// that the leaders' ring streams the whole buffer over every stream, as the flat ring does.
func (hr *hierarchy) pieces(g *group, count, es int) (n, per int) {
	if hr.single {
		return 1, max(1, count)
	}
	per = max(1, hierPieceChunks*g.cfg.chunkBytes/es)
	return max(1, (count+per-1)/per), per
}

// interStage is the inter-host stage of a pipeline of np pieces that runs fn(ig, j) for
// piece j: on the leaders' group over all streams when there is one piece, else on lane j
// mod lanes (one stream each), the lanes concurrently.
func (hr *hierarchy) interStage(np int, fn func(ig *group, j int) error) stage {
	if np == 1 {
		return stage{run: func(j int) error { return fn(hr.inter, j) }}
	}
	return stage{lanes: len(hr.lanes), run: func(j int) error { return fn(hr.lanes[j%len(hr.lanes)], j) }}
}

// hostRange is the element range of host h's shards of count elements over n ranks.
func (hr *hierarchy) hostRange(count, n, h int) (lo, hi int) {
	lo, _ = ShardRange(count, n, hr.first[h])
	_, hi = ShardRange(count, n, hr.first[h+1]-1)
	return lo, hi
}

// chunked calls fn for every chunk of bytes [lo, hi) (once when empty, so that the frame's
// header is still exchanged).
func chunked(g *group, lo, hi int, fn func(c, e int) error) error {
	chunk := g.cfg.chunkBytes
	c := lo
	for {
		e := min(c+chunk, hi)
		if err := fn(c, e); err != nil {
			return err
		}
		if c = e; c >= hi {
			return nil
		}
	}
}

// stage is one stage of a pipeline: run(j) for every piece j. Its pieces run in order on
// one goroutine, or with lanes > 1 on that many goroutines, lane l taking pieces l, l+lanes,
// ... in order (run must then keep the lanes' pieces apart, as interStage does).
type stage struct {
	run   func(j int) error
	lanes int
}

// stageOf is the one-lane stage of fn (a stage left out of the pipeline when fn is nil).
func stageOf(fn func(j int) error) stage { return stage{run: fn} }

// pipeline runs stages over pieces 0..n-1: each stage on its own goroutines (see stage),
// taking piece j once the stage before it has finished piece j. Stages with a nil run are
// left out.
func (g *group) pipeline(n int, stages ...stage) error {
	var fns []func() error
	var prev []chan struct{}
	for _, st := range stages {
		if st.run == nil {
			continue
		}
		in, done := prev, make([]chan struct{}, n)
		for j := range done {
			done[j] = make(chan struct{})
		}
		prev = done
		lanes := max(1, min(st.lanes, n))
		for l := range lanes {
			fns = append(fns, func() error {
				for j := l; j < n; j += lanes {
					if in != nil {
						select {
						case <-in[j]:
						case <-g.dead:
							return g.failure()
						}
					}
					if err := st.run(j); err != nil {
						return err
					}
					close(done[j])
				}
				return nil
			})
		}
	}
	if len(fns) == 0 {
		return nil
	}
	return g.parallel(fns...)
}

// allReduce: see Note [Hierarchical collectives].
func (hr *hierarchy) allReduce(g *group, h *Header, dt DType, op Op, count int, b []byte) error {
	es := dt.Size()
	np, per := hr.pieces(g, count, es)
	piece := func(j int) (int, int) { return j * per, min(count, (j+1)*per) }
	lg, ig := hr.local, hr.inter
	var up, down func(j int) error
	var inter stage
	if ig != nil && lg.leader() {
		hr.view.ranks, ig.ranks = hr.leaders, hr.leaders
		inter = hr.interStage(np, func(ig *group, j int) error {
			a, z := piece(j)
			p, m := b[a*es:z*es], z-a
			if len(p)*(ig.size-1) <= g.cfg.smallBytes || m < ig.size {
				return ig.directAllReduce(h, dt, op, p)
			}
			n := ig.size
			return ig.ring(h, dt, op, m, 0, 2*n-3,
				func(int) []byte { return p },
				func(int) ([]byte, int) { return p, 0 },
				func(t int) []byte {
					if t < n-1 {
						return p
					}
					return nil
				})
		})
	}
	if lg != nil {
		tmp := lg.tmpBytes(0, g.cfg.chunkBytes)
		if lg.rank == 0 {
			up = func(j int) error {
				a, z := piece(j)
				return chunked(g, a*es, z*es, func(c, e int) error {
					for p := 1; p < lg.size; p++ {
						if err := lg.recvReduce(p, 0, h, dt, op, b[c:e], b[c:e], tmp); err != nil {
							return err
						}
					}
					return nil
				})
			}
			down = func(j int) error { a, z := piece(j); return lg.sendDown(h, b, a*es, z*es) }
		} else {
			up = func(j int) error {
				a, z := piece(j)
				return chunked(g, a*es, z*es, func(c, e int) error { return lg.send(0, 0, h, b[c:e]) })
			}
			down = func(j int) error {
				a, z := piece(j)
				return chunked(g, a*es, z*es, func(c, e int) error { return lg.recv(0, 0, h, b[c:e]) })
			}
		}
	}
	return g.pipeline(np, stageOf(up), inter, stageOf(down))
}

// reduceScatter: see Note [Hierarchical collectives]. The leader reduces into the group's
// scratch buffer (src is read-only), and the ring leaves host h's range of it reduced over
// all hosts on host h's leader. Piece j is the j-th slice of every host's range (see
// hostPiece), so that every leader sends during every piece.
func (hr *hierarchy) reduceScatter(g *group, h *Header, dt DType, op Op, count int, dst, src []byte) error {
	es, n := dt.Size(), g.size
	np, _ := hr.pieces(g, count, es)
	lg, ig := hr.local, hr.inter
	mlo, mhi := ShardRange(count, n, g.rank)
	hosts := len(hr.first) - 1
	// eachRange calls fn for host h's slice of piece j, for every host.
	eachRange := func(j int, fn func(lo, hi int) error) error {
		for hh := range hosts {
			lo, hi := hr.hostPiece(count, n, np, hh, j)
			if err := fn(lo, hi); err != nil {
				return err
			}
		}
		return nil
	}
	if lg == nil || lg.rank == 0 {
		acc := g.scratchBytes(len(src))
		var up func(j int) error
		var inter stage
		// own is what the ring adds to what it receives and sends first: this host's sum,
		// which is src itself when the rank is alone on its host.
		own := acc
		if lg == nil {
			own = src
		} else {
			tmp := lg.tmpBytes(0, g.cfg.chunkBytes)
			up = func(j int) error {
				return eachRange(j, func(lo, hi int) error {
					return chunked(g, lo*es, hi*es, func(c, e int) error {
						for p := 1; p < lg.size; p++ {
							red := acc
							if p == 1 {
								red = src
							}
							if err := lg.recvReduce(p, 0, h, dt, op, acc[c:e], red[c:e], tmp); err != nil {
								return err
							}
						}
						return nil
					})
				})
			}
		}
		if ig != nil {
			hr.view.ranks, ig.ranks = hr.leaders, hr.leaders
			inter = hr.interStage(np, func(ig *group, j int) error {
				ig.segs = func(seg int) (int, int) { return hr.hostPiece(count, n, np, seg, j) }
				defer func() { ig.segs = nil }()
				return ig.ring(h, dt, op, count, 0, ig.size-2,
					func(t int) []byte {
						if t == 0 {
							return own
						}
						return acc
					},
					func(int) ([]byte, int) { return acc, 0 },
					func(int) []byte { return own })
			})
		} else if lg == nil {
			copy(acc, src) // one host of one rank: nothing to reduce
		}
		down := func(j int) error {
			s0, s1 := hr.hostPiece(count, n, np, hr.host, j)
			if lo, hi := max(mlo, s0), min(mhi, s1); lo < hi {
				copy(dst[(lo-mlo)*es:], acc[lo*es:hi*es])
			}
			if lg == nil {
				return nil
			}
			for p := 1; p < lg.size; p++ {
				plo, phi := ShardRange(count, n, lg.global(p))
				if lo, hi := max(plo, s0), min(phi, s1); lo < hi {
					if err := chunked(g, lo*es, hi*es, func(c, e int) error { return lg.send(p, 0, h, acc[c:e]) }); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return g.pipeline(np, stageOf(up), inter, stageOf(down))
	}
	up := func(j int) error {
		return eachRange(j, func(lo, hi int) error {
			return chunked(g, lo*es, hi*es, func(c, e int) error { return lg.send(0, 0, h, src[c:e]) })
		})
	}
	down := func(j int) error {
		s0, s1 := hr.hostPiece(count, n, np, hr.host, j)
		lo, hi := max(mlo, s0), min(mhi, s1)
		if lo >= hi {
			return nil
		}
		return chunked(g, (lo-mlo)*es, (hi-mlo)*es, func(c, e int) error { return lg.recv(0, 0, h, dst[c:e]) })
	}
	return g.pipeline(np, stageOf(up), stageOf(down))
}

// hostPiece is host h's slice of pipeline piece j of np: the j-th of np near-equal slices of
// its range (reduce-scatter and all-gather cut every host's range alike, so that all
// leaders send in every piece).
func (hr *hierarchy) hostPiece(count, n, np, h, j int) (lo, hi int) {
	lo, hi = hr.hostRange(count, n, h)
	a, b := ShardRange(hi-lo, np, j)
	return lo + a, lo + b
}

// allGather: see Note [Hierarchical collectives]; pieces as in reduceScatter.
func (hr *hierarchy) allGather(g *group, h *Header, dt DType, count int, dst, src []byte) error {
	n, es := g.size, dt.Size()
	np, _ := hr.pieces(g, count, es)
	lg, ig := hr.local, hr.inter
	mlo, mhi := ShardRange(count, n, g.rank)
	copy(dst[mlo*es:], src)
	hosts := len(hr.first) - 1
	// whole moves every host's slice of piece j down, chunk by chunk.
	whole := func(j int, fn func(c, e int) error) error {
		for hh := range hosts {
			lo, hi := hr.hostPiece(count, n, np, hh, j)
			if err := chunked(g, lo*es, hi*es, fn); err != nil {
				return err
			}
		}
		return nil
	}
	if lg != nil && lg.rank != 0 {
		up := func(j int) error {
			s0, s1 := hr.hostPiece(count, n, np, hr.host, j)
			lo, hi := max(mlo, s0), min(mhi, s1)
			if lo >= hi {
				return nil
			}
			return chunked(g, (lo-mlo)*es, (hi-mlo)*es, func(c, e int) error { return lg.send(0, 0, h, src[c:e]) })
		}
		down := func(j int) error {
			return whole(j, func(c, e int) error { return lg.recv(0, 0, h, dst[c:e]) })
		}
		return g.pipeline(np, stageOf(up), stageOf(down))
	}
	var up, down func(j int) error
	var inter stage
	if lg != nil {
		up = func(j int) error {
			s0, s1 := hr.hostPiece(count, n, np, hr.host, j)
			for p := 1; p < lg.size; p++ {
				plo, phi := ShardRange(count, n, lg.global(p))
				if lo, hi := max(plo, s0), min(phi, s1); lo < hi {
					if err := chunked(g, lo*es, hi*es, func(c, e int) error { return lg.recv(p, 0, h, dst[c:e]) }); err != nil {
						return err
					}
				}
			}
			return nil
		}
		down = func(j int) error {
			return whole(j, func(c, e int) error {
				for p := 1; p < lg.size; p++ {
					if err := lg.send(p, 0, h, dst[c:e]); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	if ig != nil {
		hr.view.ranks, ig.ranks = hr.leaders, hr.leaders
		inter = hr.interStage(np, func(ig *group, j int) error {
			ig.segs = func(seg int) (int, int) { return hr.hostPiece(count, n, np, seg, j) }
			defer func() { ig.segs = nil }()
			m := ig.size
			return ig.ring(h, dt, 0, count, m-1, 2*m-3,
				func(int) []byte { return dst },
				func(int) ([]byte, int) { return dst, 0 },
				func(int) []byte { return nil })
		})
	}
	return g.pipeline(np, stageOf(up), inter, stageOf(down))
}

// broadcast: see Note [Hierarchical collectives].
func (hr *hierarchy) broadcast(g *group, h *Header, root, count, es int, b []byte) error {
	np, per := hr.pieces(g, count, es)
	piece := func(j int) (int, int) { return j * per * es, min(count, (j+1)*per) * es }
	lg, ig := hr.local, hr.inter
	rh := hostOf(hr.first, root)
	rep := hr.first[hr.host] // who stands for this host: the root on its host, else the leader
	if hr.host == rh {
		rep = root
	}
	var inter, down func(j int) error
	if ig != nil && g.rank == rep {
		reps := append([]int(nil), hr.leaders...)
		reps[rh] = root
		hr.view.ranks, ig.ranks = reps, reps
		inter = func(j int) error {
			a, z := piece(j)
			if z-a <= g.cfg.smallBytes {
				return ig.directBroadcast(h, rh, b[a:z])
			}
			return ig.chainBroadcast(h, rh, b[a:z])
		}
	}
	if lg != nil {
		lrep := rep - hr.first[hr.host]
		if lg.rank == lrep {
			down = func(j int) error {
				a, z := piece(j)
				return chunked(g, a, z, func(c, e int) error {
					for p := range lg.size {
						if p != lrep {
							if err := lg.send(p, 0, h, b[c:e]); err != nil {
								return err
							}
						}
					}
					return nil
				})
			}
		} else {
			down = func(j int) error {
				a, z := piece(j)
				return chunked(g, a, z, func(c, e int) error { return lg.recv(lrep, 0, h, b[c:e]) })
			}
		}
	}
	return g.pipeline(np, stageOf(inter), stageOf(down))
}

// leader reports whether this rank leads its host (nil: alone on its host, so it does).
func (g *group) leader() bool { return g == nil || g.rank == 0 }

// sendDown sends bytes [lo, hi) of b, chunk by chunk, from the host's leader to each of its
// other ranks.
func (g *group) sendDown(h *Header, b []byte, lo, hi int) error {
	return chunked(g, lo, hi, func(c, e int) error {
		for p := 1; p < g.size; p++ {
			if err := g.send(p, 0, h, b[c:e]); err != nil {
				return err
			}
		}
		return nil
	})
}

// viewTransport is the transport among some ranks of another: rank i of the view is rank
// ranks[i] of t. Streams, aborts and messages are t's.
type viewTransport struct {
	t       Transport
	rank    int
	ranks   []int
	streams []int // stream s of the view is streams[s] of t; nil: all of t's
}

func (v *viewTransport) Rank() int { return v.rank }
func (v *viewTransport) Size() int { return len(v.ranks) }
func (v *viewTransport) Streams() int {
	if v.streams != nil {
		return len(v.streams)
	}
	return v.t.Streams()
}
func (v *viewTransport) stream(s int) int {
	if v.streams != nil {
		return v.streams[s]
	}
	return s
}
func (v *viewTransport) Send(peer, s int, h *Header, b []byte) error {
	return v.t.Send(v.ranks[peer], v.stream(s), h, b)
}
func (v *viewTransport) Recv(peer, s int, h *Header, b []byte) error {
	return v.t.Recv(v.ranks[peer], v.stream(s), h, b)
}
func (v *viewTransport) SendMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	return v.t.SendMsg(ctx, v.ranks[peer], tag, b)
}
func (v *viewTransport) RecvMsg(ctx context.Context, peer int, tag int64, b []byte) error {
	return v.t.RecvMsg(ctx, v.ranks[peer], tag, b)
}
func (v *viewTransport) Abort(err error, notify bool) { v.t.Abort(err, notify) }
func (v *viewTransport) Close(context.Context) error  { return nil }

// transport is v, and a viewRecver when v.t is one (so that reductions over the view read
// the received bytes in place, as over v.t).
func (v *viewTransport) transport() Transport {
	if _, ok := v.t.(viewRecver); ok {
		return viewRecvTransport{v}
	}
	return v
}

// viewRecvTransport is a view of a viewRecver.
type viewRecvTransport struct{ *viewTransport }

func (v viewRecvTransport) RecvView(peer, s int, h *Header, n int, check func(*Header) error, fn func(off int, p []byte)) error {
	return v.t.(viewRecver).RecvView(v.ranks[peer], v.stream(s), h, n, check, fn)
}
