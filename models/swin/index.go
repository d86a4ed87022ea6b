package swin

// This file computes, from static shapes, the index maps and masks that torchvision's
// shifted_window_attention computes with F.pad, torch.roll, view/permute and slicing.

// relativePositionIndex is torchvision's relative_position_index for a w×w window:
// entry i*N+j indexes the bias table row of the offset between tokens i and j.
func relativePositionIndex(w int) []int32 {
	n := w * w
	idx := make([]int32, n*n)
	for i := range n {
		for j := range n {
			dy := i/w - j/w + w - 1
			dx := i%w - j%w + w - 1
			idx[i*n+j] = int32(dy*(2*w-1) + dx)
		}
	}
	return idx
}

// windowGeom is the geometry of one block's window attention on an H×W feature map.
type windowGeom struct {
	h, w, win      int
	padH, padW     int // padded to window multiples
	shiftH, shiftW int // after torchvision's "window covers the map: no shift" rule
	nWh, nWw       int // windows per column and row
}

func newWindowGeom(h, w, win, shift int) windowGeom {
	g := windowGeom{h: h, w: w, win: win}
	g.padH = h + (win-h%win)%win
	g.padW = w + (win-w%win)%win
	g.shiftH, g.shiftW = shift, shift
	if win >= g.padH {
		g.shiftH = 0
	}
	if win >= g.padW {
		g.shiftW = 0
	}
	g.nWh, g.nWw = g.padH/win, g.padW/win
	return g
}

func (g windowGeom) windows() int  { return g.nWh * g.nWw }
func (g windowGeom) shifted() bool { return g.shiftH+g.shiftW > 0 }

// rolled maps a coordinate of the rolled, padded map to the padded map: torch.roll by
// (-shiftH, -shiftW) reads element (y+shiftH, x+shiftW) modulo the padded size.
func (g windowGeom) rolled(y, x int) (int, int) {
	return (y + g.shiftH) % g.padH, (x + g.shiftW) % g.padW
}

// partition returns, for batch b, the gather index from the rows of [B, H, W, C] to the rows
// of the windows [B*nW, win*win, C]: pad (−1 reads zero), roll, partition.
func (g windowGeom) partition(batch int) []int32 {
	n := g.win * g.win
	idx := make([]int32, batch*g.windows()*n)
	for b := range batch {
		for wy := range g.nWh {
			for wx := range g.nWw {
				bw := (b*g.nWh+wy)*g.nWw + wx
				for t := range n {
					py, px := g.rolled(wy*g.win+t/g.win, wx*g.win+t%g.win)
					j := int32(-1)
					if py < g.h && px < g.w {
						j = int32((b*g.h+py)*g.w + px)
					}
					idx[bw*n+t] = j
				}
			}
		}
	}
	return idx
}

// reverse returns the gather index from the window rows back to [B, H, W, C]: window
// reverse, roll back, crop the padding.
func (g windowGeom) reverse(batch int) []int32 {
	n := g.win * g.win
	idx := make([]int32, batch*g.h*g.w)
	for b := range batch {
		for py := range g.h {
			for px := range g.w {
				y := (py - g.shiftH + g.padH) % g.padH
				x := (px - g.shiftW + g.padW) % g.padW
				bw := (b*g.nWh+y/g.win)*g.nWw + x/g.win
				t := (y%g.win)*g.win + x%g.win
				idx[(b*g.h+py)*g.w+px] = int32(bw*n + t)
			}
		}
	}
	return idx
}

// mask is torchvision's shifted-window attention mask [nW, N, N]: 0 between tokens of the
// same region of the rolled map, -100 otherwise; nil when the block does not shift. Regions
// are assigned with Python's slice semantics, exactly as torchvision does, including its
// behaviour when only one axis shifts.
func (g windowGeom) mask() []float32 {
	if !g.shifted() {
		return nil
	}
	region := make([]int, g.padH*g.padW)
	hs := pySlices(g.padH, g.win, g.shiftH)
	ws := pySlices(g.padW, g.win, g.shiftW)
	count := 0
	for _, h := range hs {
		for _, w := range ws {
			for y := h[0]; y < h[1]; y++ {
				for x := w[0]; x < w[1]; x++ {
					region[y*g.padW+x] = count
				}
			}
			count++
		}
	}
	n := g.win * g.win
	m := make([]float32, g.windows()*n*n)
	for wy := range g.nWh {
		for wx := range g.nWw {
			wi := wy*g.nWw + wx
			id := func(t int) int { return region[(wy*g.win+t/g.win)*g.padW+wx*g.win+t%g.win] }
			for i := range n {
				for j := range n {
					if id(i) != id(j) {
						m[(wi*n+i)*n+j] = -100
					}
				}
			}
		}
	}
	return m
}

// pySlices resolves ((0, -win), (-win, -shift), (-shift, None)) on a length-n axis to
// [start, end) ranges as Python does (negative bounds count from the end; -0 is 0).
func pySlices(n, win, shift int) [3][2]int {
	res := func(v int) int {
		if v < 0 {
			return max(v+n, 0)
		}
		return min(v, n)
	}
	return [3][2]int{{0, res(-win)}, {res(-win), res(-shift)}, {res(-shift), n}}
}

// mergeIndex is PatchMerging's gather index from [B, H, W, C] to [B, H', W', 4C] (rows of C):
// pad H and W to even, then concatenate x[0::2,0::2], x[1::2,0::2], x[0::2,1::2], x[1::2,1::2].
func mergeIndex(batch, h, w int) (idx []int32, h2, w2 int) {
	h2, w2 = (h+1)/2, (w+1)/2
	idx = make([]int32, batch*h2*w2*4)
	dy, dx := [4]int{0, 1, 0, 1}, [4]int{0, 0, 1, 1}
	for b := range batch {
		for i := range h2 {
			for j := range w2 {
				for k := range 4 {
					y, x := 2*i+dy[k], 2*j+dx[k]
					v := int32(-1)
					if y < h && x < w {
						v = int32((b*h+y)*w + x)
					}
					idx[((b*h2+i)*w2+j)*4+k] = v
				}
			}
		}
	}
	return idx, h2, w2
}
