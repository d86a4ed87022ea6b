package ops

import (
	"math/bits"

	G "gorgonia.org/gorgonia"
)

// maxPoolScratch is what MaxPool2d's forward leaves for its gradient: the position of each
// window's first maximum, so that the backward is a scatter instead of a second search.
type maxPoolScratch struct {
	arg []int32 // per output element (N×C×Ho×Wo): offset of the maximum in its H×W plane
	x   any     // the []T the forward searched, to recognise it in the gradient
}

// maxPool computes the forward (y) or, with op.grad, scatters dy to the first maximum of
// each window (dst is dx). The gradient reuses the forward's argmax when it gets the very
// slice the forward searched: within one run of a tape the forward runs first and nothing
// writes the input in between (the gradient reads x, so it would be wrong anyway if
// something did); otherwise it searches again. Planes are split across Threads().
func maxPool[T Float](op *maxPoolOp, in []G.Value, dst []T) error {
	g := &op.g
	hw, P := g.H*g.W, g.OH*g.OW
	planes := op.n * g.C
	x, err := kernData[T](op.name, in[0], "x", planes*hw)
	if err != nil {
		return err
	}
	sc := op.sc
	if len(sc.arg) != planes*P {
		sc.arg = make([]int32, planes*P)
	}
	x32, c32 := any(x).([]float32)
	c32 = c32 && simdOK()
	if !op.grad {
		splitRows(planes, hw, func(lo, hi int) {
			if c32 {
				simdMaxPoolSearch(g, x32, any(dst).([]float32), sc.arg, lo, hi)
				return
			}
			maxPoolSearch(g, x, dst, sc.arg, lo, hi)
		})
		sc.x = x
		return nil
	}
	dy, err := kernData[T](op.name, in[1], "dy", planes*P)
	if err != nil {
		return err
	}
	prev, ok := sc.x.([]T)
	fresh := ok && len(prev) == len(x) && len(x) > 0 && &prev[0] == &x[0]
	splitRows(planes, hw, func(lo, hi int) {
		if c32 {
			if !fresh {
				simdMaxPoolSearch(g, x32, nil, sc.arg, lo, hi)
			}
			if simdMaxPoolScatter(sc.arg, any(dy).([]float32), any(dst).([]float32), lo, hi, P, hw) {
				return
			}
		} else if !fresh {
			maxPoolSearch(g, x, nil, sc.arg, lo, hi)
		}
		for pl := lo; pl < hi; pl++ {
			dxp := dst[pl*hw : (pl+1)*hw]
			clear(dxp)
			arg, dyp := sc.arg[pl*P:(pl+1)*P], dy[pl*P:(pl+1)*P]
			for o, a := range arg {
				dxp[a] += dyp[o]
			}
		}
	})
	return nil
}

// maxPoolSearch writes, for planes [lo, hi) of x, each window's maximum into y (unless y is
// nil) and the in-plane offset of its first maximum into arg. NaN is the maximum of any
// window holding one, and the first NaN its position, as in PyTorch.
func maxPoolSearch[T Float](g *convGeom, x, y []T, arg []int32, lo, hi int) {
	hw, P := g.H*g.W, g.OH*g.OW
	for pl := lo; pl < hi; pl++ {
		xp := x[pl*hw : (pl+1)*hw]
		ap := arg[pl*P : (pl+1)*P]
		var yp []T
		if y != nil {
			yp = y[pl*P : (pl+1)*P]
		}
		for oh := 0; oh < g.OH; oh++ {
			h0 := oh*g.SH - g.PH
			ih0, ih1 := max(h0, 0), min(h0+g.KH, g.H)
			full3 := g.KH == 3 && g.KW == 3 && h0 >= 0 && h0+3 <= g.H
			for ow := 0; ow < g.OW; ow++ {
				w0 := ow*g.SW - g.PW
				if full3 && w0 >= 0 && w0+3 <= g.W {
					// ResNet's stem pool: a whole 3x3 window, unrolled.
					b := h0*g.W + w0
					r0, r1, r2 := xp[b:b+3:b+3], xp[b+g.W:b+g.W+3:b+g.W+3], xp[b+2*g.W:b+2*g.W+3:b+2*g.W+3]
					// A tree, not a chain: the builtin's NaN handling makes each max slow,
					// and independent ones overlap.
					m := max(max(max(r0[0], r0[1]), max(r0[2], r1[0])), max(max(r1[1], r1[2]), max(r2[0], max(r2[1], r2[2]))))
					// The first maximum's position from a bit mask of the positions equal to
					// it, without branches (its position is random: a chain of tests
					// mispredicts about once per window). A NaN maximum equals nothing and
					// takes the first NaN instead.
					var k int
					if m == m {
						mask := b2u(r0[0] == m) | b2u(r0[1] == m)<<1 | b2u(r0[2] == m)<<2 |
							b2u(r1[0] == m)<<3 | b2u(r1[1] == m)<<4 | b2u(r1[2] == m)<<5 |
							b2u(r2[0] == m)<<6 | b2u(r2[1] == m)<<7 | b2u(r2[2] == m)<<8
						p := bits.TrailingZeros32(mask)
						k = p/3*g.W + p%3
					} else {
						for p, v := range [9]T{r0[0], r0[1], r0[2], r1[0], r1[1], r1[2], r2[0], r2[1], r2[2]} {
							if v != v {
								k = p/3*g.W + p%3
								break
							}
						}
					}
					o := oh*g.OW + ow
					ap[o] = int32(b + k)
					if yp != nil {
						yp[o] = xp[b+k] // m, but -0 where the first maximum is -0
					}
					continue
				}
				iw0, iw1 := max(w0, 0), min(w0+g.KW, g.W)
				// Two passes, both without data-dependent branches in the hot loop: the
				// maximum (max propagates NaN), then its first position.
				m := xp[ih0*g.W+iw0]
				for ih := ih0; ih < ih1; ih++ {
					for _, v := range xp[ih*g.W+iw0 : ih*g.W+iw1] {
						m = max(m, v)
					}
				}
				best := ih0*g.W + iw0
			find:
				for ih := ih0; ih < ih1; ih++ {
					for k, v := range xp[ih*g.W+iw0 : ih*g.W+iw1] {
						if v == m || v != v {
							best = ih*g.W + iw0 + k
							break find
						}
					}
				}
				o := oh*g.OW + ow
				ap[o] = int32(best)
				if yp != nil {
					yp[o] = xp[best]
				}
			}
		}
	}
}

// b2u is 1 for true and 0 for false, compiled without a branch.
func b2u(b bool) uint32 {
	var u uint32
	if b {
		u = 1
	}
	return u
}
