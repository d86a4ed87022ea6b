package ops

import (
	"math"
	"math/rand"
	"testing"
)

// TestMaxPoolSearch3x3: the unrolled 3x3 search equals a plain row-major scan (the first
// maximum, or the first NaN when the window holds one, as PyTorch's CPU kernel) on inputs
// full of ties (values from a set of 3), NaNs and signed zeros, at strides 1 and 2 with and
// without padding, so that windows both inside and on the border are checked; the output is
// the first maximum's value bit for bit (-0 where that is -0).
func TestMaxPoolSearch3x3(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	vals := []float64{-1, 0, 2, math.NaN(), math.Copysign(0, -1)}
	for _, c := range []struct{ s, p int }{{1, 0}, {1, 1}, {2, 1}, {2, 0}} {
		g := convGeom{C: 3, H: 9, W: 8, KH: 3, KW: 3, SH: c.s, SW: c.s, PH: c.p, PW: c.p, DH: 1, DW: 1}
		g.OH, g.OW = convOutSize(g.H, 3, c.s, c.p, 1), convOutSize(g.W, 3, c.s, c.p, 1)
		x := make([]float64, 2*g.C*g.H*g.W)
		for i := range x {
			n := 3
			if rng.Intn(20) == 0 {
				n = len(vals) // now and then a NaN or a -0
			}
			x[i] = vals[rng.Intn(n)]
		}
		planes, P := 2*g.C, g.OH*g.OW
		y, arg := make([]float64, planes*P), make([]int32, planes*P)
		maxPoolSearch(&g, x, y, arg, 0, planes)
		for pl := 0; pl < planes; pl++ {
			xp := x[pl*g.H*g.W:]
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					best := -1
					for ih := max(oh*c.s-c.p, 0); ih < min(oh*c.s-c.p+3, g.H); ih++ {
						for iw := max(ow*c.s-c.p, 0); iw < min(ow*c.s-c.p+3, g.W); iw++ {
							if v := xp[ih*g.W+iw]; best < 0 || v > xp[best] || (v != v && xp[best] == xp[best]) {
								best = ih*g.W + iw
							}
						}
					}
					o := pl*P + oh*g.OW + ow
					want := xp[best]
					if int(arg[o]) != best || !(math.Float64bits(y[o]) == math.Float64bits(want) || (y[o] != y[o] && want != want)) {
						t.Fatalf("stride %d pad %d, plane %d, output (%d,%d): got %v at %d, want %v at %d", c.s, c.p, pl, oh, ow, y[o], arg[o], want, best)
					}
				}
			}
		}
	}
}
