package swin

// Geometry is one block's window-attention geometry on an H×W feature map: padding to
// window multiples, the shift after torchvision's "a window that covers the map does not
// shift" rule, and the index maps and mask the CPU model gathers with. It is exported so
// that device implementations can gather exactly as the CPU model does.
type Geometry struct{ g windowGeom }

// NewGeometry is the geometry of a block with window win and shift shift (0 for the
// unshifted blocks) on an h×w map.
func NewGeometry(h, w, win, shift int) Geometry { return Geometry{newWindowGeom(h, w, win, shift)} }

// Windows is the number of windows per image.
func (g Geometry) Windows() int { return g.g.windows() }

// WindowsPerAxis is the number of windows per column and per row.
func (g Geometry) WindowsPerAxis() (nh, nw int) { return g.g.nWh, g.g.nWw }

// Shifted reports whether the block shifts on either axis.
func (g Geometry) Shifted() bool { return g.g.shifted() }

// Shift is the shift applied on each axis (0 on an axis the window covers).
func (g Geometry) Shift() (h, w int) { return g.g.shiftH, g.g.shiftW }

// Padded is the map size after padding to window multiples.
func (g Geometry) Padded() (h, w int) { return g.g.padH, g.g.padW }

// Partition is the gather index from the rows of [B, H, W, C] to the rows of the windows
// [B*nW, win*win, C] (pad, roll, partition; −1 reads zero).
func (g Geometry) Partition(batch int) []int32 { return g.g.partition(batch) }

// Reverse is the gather index from the window rows back to [B, H, W, C] (window reverse,
// roll back, crop the padding).
func (g Geometry) Reverse(batch int) []int32 { return g.g.reverse(batch) }

// Mask is torchvision's shifted-window attention mask [nW, N, N] (0 within a region, −100
// across), nil when the block does not shift.
func (g Geometry) Mask() []float32 { return g.g.mask() }

// MergeIndex is PatchMerging's gather index from [B, H, W, C] to [B, H', W', 4C] (rows of C,
// −1 reads zero) and the merged size H', W'.
func MergeIndex(batch, h, w int) (idx []int32, h2, w2 int) { return mergeIndex(batch, h, w) }
