package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
)

// The index maps and masks torchvision's shifted_window_attention and PatchMerging compute
// with F.pad, torch.roll, view/permute and slicing, from static shapes (as models/swin does
// on the CPU), uploaded once per shape and kept on the device.

// geom is one block's window geometry on an H×W map.
type geom struct {
	h, w, win      int
	padH, padW     int // padded to window multiples
	shiftH, shiftW int // zero on an axis the window covers (torchvision's rule)
	nWh, nWw       int
}

func newGeom(h, w, win, shift int) geom {
	g := geom{h: h, w: w, win: win}
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

func (g geom) windows() int  { return g.nWh * g.nWw }
func (g geom) shifted() bool { return g.shiftH+g.shiftW > 0 }

// partition maps each row of the windows [B*nW, win*win, C] to the row of [B, H, W, C] it
// reads after padding (-1: a zero) and torch.roll by (-shiftH, -shiftW).
func (g geom) partition(batch int) []int32 {
	n := g.win * g.win
	idx := make([]int32, batch*g.windows()*n)
	for b := range batch {
		for wy := range g.nWh {
			for wx := range g.nWw {
				bw := (b*g.nWh+wy)*g.nWw + wx
				for t := range n {
					py := (wy*g.win + t/g.win + g.shiftH) % g.padH
					px := (wx*g.win + t%g.win + g.shiftW) % g.padW
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

// reverse maps each row of [B, H, W, C] to the window row it comes from: window reverse,
// roll back, crop.
func (g geom) reverse(batch int) []int32 {
	n := g.win * g.win
	idx := make([]int32, batch*g.h*g.w)
	for b := range batch {
		for py := range g.h {
			for px := range g.w {
				y := (py - g.shiftH + g.padH) % g.padH
				x := (px - g.shiftW + g.padW) % g.padW
				bw := (b*g.nWh+y/g.win)*g.nWw + x/g.win
				idx[(b*g.h+py)*g.w+px] = int32(bw*n + (y%g.win)*g.win + x%g.win)
			}
		}
	}
	return idx
}

// mask is the shifted-window attention mask [nW, N, N]: 0 within a region of the rolled map,
// -100 across regions, regions assigned with Python's slice semantics as torchvision does.
func (g geom) mask() []float32 {
	region := make([]int, g.padH*g.padW)
	hs, ws := pySlices(g.padH, g.win, g.shiftH), pySlices(g.padW, g.win, g.shiftW)
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

// pySlices resolves ((0, -win), (-win, -shift), (-shift, None)) on a length-n axis as Python.
func pySlices(n, win, shift int) [3][2]int {
	res := func(v int) int {
		if v < 0 {
			return max(v+n, 0)
		}
		return min(v, n)
	}
	return [3][2]int{{0, res(-win)}, {res(-win), res(-shift)}, {res(-shift), n}}
}

// mergeIndex is PatchMerging's gather from [B, H, W, C] to [B, H', W', 4C] (rows of C): pad
// to even, then x[0::2,0::2], x[1::2,0::2], x[0::2,1::2], x[1::2,1::2] concatenated.
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

// geomKey names a cached device index or mask.
type geomKey struct {
	kind                  byte // 'p' partition, 'r' reverse, 'm' mask, 'g' merge
	batch, h, w, win, sft int
}

// index returns the cached device copy of an Int32 index, building it on first use.
func (s *Swin) index(k geomKey, build func() []int32) (*cuda.Tensor, error) {
	if t, ok := s.geom[k]; ok {
		return t, nil
	}
	v := build()
	t, err := s.d.FromHostInt32(v, len(v))
	if err != nil {
		return nil, fmt.Errorf("gpuswin: uploading an index of %d entries: %w", len(v), err)
	}
	s.geom[k] = t
	return t, nil
}

// maskTensor returns the cached device copy of g's attention mask [nW, N*N].
func (s *Swin) maskTensor(g geom) (*cuda.Tensor, error) {
	k := geomKey{kind: 'm', h: g.h, w: g.w, win: g.win, sft: g.shiftH<<16 | g.shiftW}
	if t, ok := s.geom[k]; ok {
		return t, nil
	}
	n := g.win * g.win
	t, err := s.d.FromHost(g.mask(), g.windows(), n*n)
	if err != nil {
		return nil, fmt.Errorf("gpuswin: uploading an attention mask: %w", err)
	}
	s.geom[k] = t
	return t, nil
}
