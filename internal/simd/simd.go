// Package simd holds AVX-512 versions, in C, of float32 vector loops that run over every
// parameter each training step (gradient accumulation, the SGD update), with Go loops as
// the fallback. The C versions compute bit for bit what the Go loops compute (no fused
// multiply-adds); they run with cgo on amd64 CPUs that have AVX-512, the Go loops
// otherwise (CGO_ENABLED=0, the purego tag, other CPUs).
package simd

// Enabled reports whether the C kernels are in use (cgo, amd64, a CPU with AVX-512).
func Enabled() bool { return enabled }

// AddTo sets dst[i] += src[i] for i < len(src); dst must be at least as long as src.
func AddTo(dst, src []float32) {
	dst = dst[:len(src)]
	if enabled && len(src) >= minLen {
		addTo(dst, src)
		return
	}
	addToGo(dst, src)
}

// SGDMomentum is one step of SGD with momentum (torch.optim.SGD without dampening, weight
// decay or Nesterov): mom[i] = mu·mom[i] + g[i], then w[i] -= lr·mom[i]. g and mom must be
// at least as long as w.
func SGDMomentum(w, g, mom []float32, lr, mu float32) {
	g, mom = g[:len(w)], mom[:len(w)]
	if enabled && len(w) >= minLen {
		sgdMomentum(w, g, mom, lr, mu)
		return
	}
	sgdMomentumGo(w, g, mom, lr, mu)
}

// minLen is the shortest slice worth a cgo call (one costs about as much as 50 elements of
// the Go loops).
const minLen = 64

// addToGo is AddTo in Go, unrolled by 8 on slices bounds-checked once (2x the plain loop).
func addToGo(dst, src []float32) {
	dst = dst[:len(src)]
	i := 0
	for ; i+8 <= len(src); i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < len(src); i++ {
		dst[i] += src[i]
	}
}

// sgdMomentumGo is SGDMomentum in Go.
func sgdMomentumGo(w, g, mom []float32, lr, mu float32) {
	g, mom = g[:len(w)], mom[:len(w)]
	for i := range w {
		v := mu*mom[i] + g[i]
		mom[i] = v
		w[i] -= lr * v
	}
}
