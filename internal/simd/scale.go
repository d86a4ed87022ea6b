package simd

// Scale sets x[i] *= s.
func Scale(x []float32, s float32) {
	if enabled && len(x) >= minLen {
		scale(x, s)
		return
	}
	scaleGo(x, s)
}

// Div sets x[i] /= d, correctly rounded as Go's division (the vector division is IEEE's too).
func Div(x []float32, d float32) {
	if enabled && len(x) >= minLen {
		div(x, d)
		return
	}
	divGo(x, d)
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
