package ops

// The filter gradient of a convolution needs the im2col columns of x, which the forward has
// just built. When the whole batch's columns fit in convKeepBytes the forward keeps them, and
// the filter gradient uses them instead of running im2col again (im2col was about 7% of a
// resnet18 training step at 64x64, half of it in the filter gradient). The extra memory is
// that bound at most per layer: for resnet18 at 64x64 and batch 16, 9.6 MB for conv1, 9.4 MB
// for each 3x3 convolution of layer1, 2.4-4.7 MB for those of layer2, 0.6-2.4 MB for those
// of layer3 and layer4, 0.07-0.26 MB for the strided 1x1 downsamples (about 77 MB in all;
// 1x1 stride-1 convolutions have no columns). Bigger layers recompute, as before.

// convKeepBytes bounds the kept columns of one layer.
const convKeepBytes = 16 << 20

// convKeepBuf returns the buffer for the whole batch's columns of a forward over n images,
// or nil when they do not fit in convKeepBytes. Either way it forgets the columns kept
// before; the forward calls convKept's counterpart, sc.keepX = x, once the buffer is full.
func convKeepBuf[T Float](g *convGeom, sc *convScratch, n int) []T {
	sc.keepX = nil
	size := n * g.colRows() * g.OH * g.OW
	if g.directCols || size*elemSize[T]() > convKeepBytes {
		return nil
	}
	return gemmScratchOf[T](&sc.keep, size)
}

// convKept returns the columns the forward kept for x, or nil. It recognises x by identity
// (the very slice the forward read): within one run of a tape the forward runs before the
// gradients and nothing writes x in between (the filter gradient reads x itself, so it would
// be wrong anyway if something did).
func convKept[T Float](g *convGeom, sc *convScratch, n int, x []T) []T {
	prev, ok := sc.keepX.([]T)
	if !ok || len(prev) != len(x) || len(x) == 0 || &prev[0] != &x[0] {
		return nil
	}
	return gemmScratchOf[T](&sc.keep, n*g.colRows()*g.OH*g.OW)
}
