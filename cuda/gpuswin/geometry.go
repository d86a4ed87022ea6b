package gpuswin

import (
	"fmt"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/models/swin"
)

// The index maps and masks torchvision's shifted_window_attention and PatchMerging compute
// with F.pad, torch.roll, view/permute and slicing come from models/swin (swin.Geometry,
// swin.MergeIndex: the very maps the CPU model gathers with), uploaded once per shape and
// kept on the device.

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
	t, err := s.st.Dev.FromHostInt32(v, len(v))
	if err != nil {
		return nil, fmt.Errorf("gpuswin: uploading an index of %d entries: %w", len(v), err)
	}
	s.geom[k] = t
	return t, nil
}

// maskTensor returns the cached device copy of g's attention mask [nW, N*N] for an h×w map
// and window win.
func (s *Swin) maskTensor(g swin.Geometry, h, w, win int) (*cuda.Tensor, error) {
	sh, sw := g.Shift()
	k := geomKey{kind: 'm', h: h, w: w, win: win, sft: sh<<16 | sw}
	if t, ok := s.geom[k]; ok {
		return t, nil
	}
	n := win * win
	t, err := s.st.Dev.FromHost(g.Mask(), g.Windows(), n*n)
	if err != nil {
		return nil, fmt.Errorf("gpuswin: uploading an attention mask: %w", err)
	}
	s.geom[k] = t
	return t, nil
}
