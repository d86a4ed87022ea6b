package simd

// AddTo sets dst[i] += src[i] for i < len(src); dst must be at least as long as src.
func AddTo(dst, src []float32) {
	dst = dst[:len(src)]
	if On() && len(src) >= minLen {
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
	if On() && len(w) >= minLen {
		sgdMomentum(w, g, mom, lr, mu)
		return
	}
	sgdMomentumGo(w, g, mom, lr, mu)
}

// Scale sets x[i] *= s.
func Scale(x []float32, s float32) {
	if On() && len(x) >= minLen {
		scale(x, s)
		return
	}
	scaleGo(x, s)
}

// Div sets x[i] /= d, correctly rounded as Go's division (the vector division is IEEE's too).
func Div(x []float32, d float32) {
	if On() && len(x) >= minLen {
		div(x, d)
		return
	}
	divGo(x, d)
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

func scaleGo(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func divGo(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}
