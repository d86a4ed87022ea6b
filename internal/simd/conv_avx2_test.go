//go:build cgo && amd64 && !purego && linux

package simd

import (
	"fmt"
	"math"
	"math/rand"
	"syscall"
	"testing"
	"unsafe"
)

// The AVX2 kernels of conv_avx2.h against their AVX-512 twins (which nn/ops's tests compare
// with the Go code): bit for bit, GELU included (both levels compute the same doubles), on
// random geometries. Every input and output lies against a page that cannot be read or
// written, at its end or at its start, so a plain load or store past either end faults,
// and the outputs start as sentinels, so a write outside what AVX-512 writes shows. Needs a
// CPU with AVX-512 (and the AVX2 level offered); skipped otherwise.

// guarded returns n float32s in memory of their own, ending (atEnd) or starting at an
// inaccessible page; free unmaps it.
func guarded(t testing.TB, n int, atEnd bool) (s []float32, free func()) {
	t.Helper()
	pg := syscall.Getpagesize()
	body := (n*4 + pg - 1) / pg * pg
	mem, err := syscall.Mmap(-1, 0, body+2*pg, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[:pg], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[pg+body:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	off := pg
	if atEnd {
		off = pg + body - n*4
	}
	if n > 0 {
		s = unsafe.Slice((*float32)(unsafe.Pointer(&mem[off])), n)
	} else {
		s = []float32{}
	}
	return s, func() { syscall.Munmap(mem) }
}

// levelPair skips the test unless both AVX2 and AVX-512 run here; it logs the level the
// process started at (GP_SIMD's, or the best).
func levelPair(t testing.TB) {
	t.Helper()
	t.Logf("level at start: %s", Current())
	for _, l := range []Level{AVX2, AVX512} {
		if err := Supported(l); err != nil {
			t.Skip(err)
		}
	}
}

func at(t testing.TB, l Level, f func()) {
	t.Helper()
	restore, err := Set(l)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	f()
}

func bitsEqual(t *testing.T, what string, want, got []float32) bool {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Errorf("%s: [%d] = %g (%#x) at avx2, %g (%#x) at avx512", what, i, got[i], math.Float32bits(got[i]),
				want[i], math.Float32bits(want[i]))
			return false
		}
	}
	return true
}

func asI32(s []float32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&s[0])), len(s))
}

// convTables builds nn/ops's shiftTable and colIndex tables for g.
type convTables struct {
	shift                    []int32
	mask                     []uint16
	gat, padPos, padOff, idx []int32
}

func buildTables(g *ConvGeom) *convTables {
	P, kk := g.OH*g.OW, g.KH*g.KW
	nch := (P + 15) / 16
	tb := &convTables{shift: make([]int32, kk), mask: make([]uint16, kk*nch), padOff: []int32{0}}
	in := func(ih, iw int) bool { return ih >= 0 && ih < g.H && iw >= 0 && iw < g.W }
	for i := 0; i < g.KH; i++ {
		for j := 0; j < g.KW; j++ {
			q := i*g.KW + j
			tb.shift[q] = int32((i*g.DH-g.PH)*g.W + j*g.DW - g.PW)
			for k := 0; k < P; k++ {
				if in(k/g.OW-g.PH+i*g.DH, k%g.OW-g.PW+j*g.DW) {
					tb.mask[q*nch+k/16] |= 1 << (k % 16)
				}
			}
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					ih, iw := oh*g.SH-g.PH+i*g.DH, ow*g.SW-g.PW+j*g.DW
					if in(ih, iw) {
						tb.gat = append(tb.gat, int32(ih*g.W+iw))
						continue
					}
					tb.padPos = append(tb.padPos, int32(oh*g.OW+ow))
					tb.gat = append(tb.gat, 0)
				}
			}
			tb.padOff = append(tb.padOff, int32(len(tb.padPos)))
		}
	}
	for c := 0; c < g.C; c++ {
		for q := 0; q < kk; q++ {
			for k := 0; k < P; k++ {
				tb.idx = append(tb.idx, tb.gat[q*P+k]+int32(c*g.H*g.W))
			}
			for _, k := range tb.padPos[tb.padOff[q]:tb.padOff[q+1]] {
				tb.idx[(c*kk+q)*P+int(k)] = -1
			}
		}
	}
	return tb
}

func outSize(in, k, s, p, d int) int { return (in+2*p-d*(k-1)-1)/s + 1 }

// randConvGeom is a random convolution geometry with a non-empty output; shift asks for
// stride 1 and OW == W (the shifted-plane kernels').
func randConvGeom(rng *rand.Rand, shift bool) ConvGeom {
	for {
		g := ConvGeom{C: 1 + rng.Intn(4), H: 1 + rng.Intn(24), W: 1 + rng.Intn(40), KH: 1 + rng.Intn(7), KW: 1 + rng.Intn(7),
			SH: 1 + rng.Intn(3), SW: 1 + rng.Intn(3), DH: 1 + rng.Intn(2), DW: 1 + rng.Intn(2)}
		if rng.Intn(3) == 0 {
			g.SW = 2
		}
		if rng.Intn(4) == 0 {
			g.W = 40 + rng.Intn(90)
		}
		g.PH, g.PW = rng.Intn(g.KH), rng.Intn(g.KW)
		if shift {
			g.SH, g.SW, g.DW = 1, 1, 1
			g.PW = (g.KW - 1) / 2
			g.KW = 2*g.PW + 1
		}
		g.OH, g.OW = outSize(g.H, g.KH, g.SH, g.PH, g.DH), outSize(g.W, g.KW, g.SW, g.PW, g.DW)
		if g.OH > 0 && g.OW > 0 && (!shift || g.OW == g.W) {
			return g
		}
	}
}

func fillRand(rng *rand.Rand, s []float32) {
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
}

func fillSentinel(s []float32) {
	for i := range s {
		s[i] = float32(-7 - i%5)
	}
}

// TestConvAVX2MatchesAVX512 compares every kernel of conv_avx2.h with its AVX-512 twin.
func TestConvAVX2MatchesAVX512(t *testing.T) {
	levelPair(t)
	rng := rand.New(rand.NewSource(21))
	for trial := 0; trial < 400; trial++ {
		atEnd := trial%2 == 0
		shiftable := trial%3 == 0
		g := randConvGeom(rng, shiftable)
		P, kk, hw := g.OH*g.OW, g.KH*g.KW, g.H*g.W
		ld := P + rng.Intn(4)
		lo := rng.Intn(g.C)
		hi := lo + 1 + rng.Intn(g.C-lo)
		name := fmt.Sprintf("trial %d %+v ld %d [%d,%d) atEnd %v", trial, g, ld, lo, hi, atEnd)
		tb := buildTables(&g)
		ncol := (g.C*kk-1)*ld + P

		x, f1 := guarded(t, g.C*hw, atEnd)
		fillRand(rng, x)
		c2, f2 := guarded(t, ncol, atEnd)
		c5, f3 := guarded(t, ncol, atEnd)
		im2col := func(run func(col []float32)) {
			fillSentinel(c2)
			fillSentinel(c5)
			at(t, AVX2, func() { run(c2) })
			at(t, AVX512, func() { run(c5) })
		}
		im2col(func(col []float32) { Im2col(&g, x, col, ld, lo, hi) })
		bitsEqual(t, name+" im2col", c5, c2)
		im2col(func(col []float32) { Im2colGather(&g, tb.gat, tb.padPos, tb.padOff, x, col, ld, lo, hi) })
		bitsEqual(t, name+" im2col gather", c5, c2)
		if shiftable {
			im2col(func(col []float32) { Im2colShift(&g, tb.shift, tb.mask, x, col, ld, lo, hi) })
			bitsEqual(t, name+" im2col shift", c5, c2)
		}

		col := c2
		fillRand(rng, col)
		d2, f4 := guarded(t, g.C*hw, atEnd)
		d5, f5 := guarded(t, g.C*hw, atEnd)
		col2im := func(run func(dx []float32)) {
			fillSentinel(d2)
			fillSentinel(d5)
			at(t, AVX2, func() { run(d2) })
			at(t, AVX512, func() { run(d5) })
		}
		col2im(func(dx []float32) { Col2im(&g, col, dx, ld, lo, hi) })
		bitsEqual(t, name+" col2im", d5, d2)
		if shiftable {
			col2im(func(dx []float32) { Col2imShift(&g, tb.shift, tb.mask, col, dx, ld, lo, hi) })
			bitsEqual(t, name+" col2im shift", d5, d2)
		}
		col2im(func(dx []float32) {
			Col2imIndexedAdd(tb.idx[lo*kk*P:hi*kk*P], P, col[lo*kk*ld:], dx, ld)
		})
		bitsEqual(t, name+" col2im indexed", d5, d2)
		for _, f := range []func(){f1, f2, f3, f4, f5} {
			f()
		}
	}
}

// TestMaxPoolAVX2MatchesAVX512: the search (positions and values, on ties, NaNs and signed
// zeros) and the gradient scatter.
func TestMaxPoolAVX2MatchesAVX512(t *testing.T) {
	levelPair(t)
	rng := rand.New(rand.NewSource(22))
	vals := []float32{-1, 0, 2, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(-1))}
	for trial := 0; trial < 300; trial++ {
		atEnd := trial%2 == 0
		k := 1 + rng.Intn(5)
		g := ConvGeom{C: 1 + rng.Intn(3), H: 1 + rng.Intn(20), W: 1 + rng.Intn(70), KH: k, KW: k, SH: 1 + rng.Intn(3), DH: 1, DW: 1}
		if trial%5 == 0 {
			g.KH, g.KW, g.H, g.W = 3, 3, 30+rng.Intn(90), 30+rng.Intn(90)
		}
		g.SW = g.SH
		if rng.Intn(4) == 0 {
			g.SW = 1 + rng.Intn(3)
		}
		g.PH, g.PW = rng.Intn(g.KH/2+1), rng.Intn(g.KW/2+1)
		g.OH, g.OW = outSize(g.H, g.KH, g.SH, g.PH, 1), outSize(g.W, g.KW, g.SW, g.PW, 1)
		if g.OH <= 0 || g.OW <= 0 {
			continue
		}
		planes, P, hw := 2*g.C, g.OH*g.OW, g.H*g.W
		name := fmt.Sprintf("trial %d %+v atEnd %v", trial, g, atEnd)
		x, f1 := guarded(t, planes*hw, atEnd)
		nv := 3
		if trial%3 == 0 {
			nv = len(vals)
		}
		for i := range x {
			x[i] = vals[rng.Intn(nv)]
			if trial%4 == 1 {
				x[i] = float32(rng.NormFloat64())
			}
		}
		lo := rng.Intn(planes)
		hi := lo + 1 + rng.Intn(planes-lo)
		y2, f2 := guarded(t, planes*P, atEnd)
		y5, f3 := guarded(t, planes*P, atEnd)
		a2, f4 := guarded(t, planes*P, atEnd)
		a5, f5 := guarded(t, planes*P, atEnd)
		for _, withY := range []bool{true, false} {
			fillSentinel(y2)
			fillSentinel(y5)
			fillSentinel(a2)
			fillSentinel(a5)
			var yy2, yy5 []float32
			if withY {
				yy2, yy5 = y2, y5
			}
			at(t, AVX2, func() { MaxPoolSearch(&g, x, yy2, asI32(a2), lo, hi) })
			at(t, AVX512, func() { MaxPoolSearch(&g, x, yy5, asI32(a5), lo, hi) })
			bitsEqual(t, fmt.Sprintf("%s y=%v max-pool arg", name, withY), a5, a2)
			bitsEqual(t, fmt.Sprintf("%s y=%v max-pool values", name, withY), y5, y2)
		}
		arg := asI32(a5)
		for i := range arg {
			arg[i] = int32(rng.Intn(hw)) // collisions too: dy added in order
		}
		dy, f6 := guarded(t, planes*P, atEnd)
		fillRand(rng, dy)
		d2, f7 := guarded(t, planes*hw, atEnd)
		d5, f8 := guarded(t, planes*hw, atEnd)
		fillSentinel(d2)
		fillSentinel(d5)
		at(t, AVX2, func() { MaxPoolScatter(arg, dy, d2, lo, hi, P, hw) })
		at(t, AVX512, func() { MaxPoolScatter(arg, dy, d5, lo, hi, P, hw) })
		bitsEqual(t, name+" max-pool scatter", d5, d2)
		for _, f := range []func(){f1, f2, f3, f4, f5, f6, f7, f8} {
			f()
		}
	}
}

// TestColSumsGELUAVX2MatchesAVX512: biasGrad's column sums and GELU's forward and backward
// (the same doubles at both levels, so the same float32s).
func TestColSumsGELUAVX2MatchesAVX512(t *testing.T) {
	levelPair(t)
	rng := rand.New(rand.NewSource(23))
	for trial := 0; trial < 200; trial++ {
		atEnd := trial%2 == 0
		rows, c := rng.Intn(40), 1+rng.Intn(300)
		name := fmt.Sprintf("trial %d rows %d c %d atEnd %v", trial, rows, c, atEnd)
		dy, f1 := guarded(t, rows*c, atEnd)
		fillRand(rng, dy)
		s2, f2 := guarded(t, c, atEnd)
		s5, f3 := guarded(t, c, atEnd)
		fillSentinel(s2)
		fillSentinel(s5)
		at(t, AVX2, func() { ColSums(dy, rows, c, s2) })
		at(t, AVX512, func() { ColSums(dy, rows, c, s5) })
		bitsEqual(t, name+" col sums", s5, s2)
		f1()
		f2()
		f3()
	}
	special := []float32{0, float32(math.Copysign(0, -1)), 2, -2, 1.9999999, -1.9999999, 2.0000002, -2.0000002, 30, -30,
		31, -31, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30, 1e-45, 26.5, -26.5}
	for trial := 0; trial < 200; trial++ {
		atEnd := trial%2 == 0
		n := rng.Intn(70)
		if trial%10 == 0 {
			n = 1000 + rng.Intn(5000)
		}
		name := fmt.Sprintf("trial %d n %d atEnd %v", trial, n, atEnd)
		x, f1 := guarded(t, n, atEnd)
		dy, f2 := guarded(t, n, atEnd)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * []float64{1, 3, 10}[trial%3])
			if rng.Intn(6) == 0 {
				x[i] = special[rng.Intn(len(special))]
			}
		}
		fillRand(rng, dy)
		o2, f3 := guarded(t, n, atEnd)
		o5, f4 := guarded(t, n, atEnd)
		fillSentinel(o2)
		fillSentinel(o5)
		at(t, AVX2, func() { GELUFwd(x, o2) })
		at(t, AVX512, func() { GELUFwd(x, o5) })
		nanSame(o5, o2)
		bitsEqual(t, name+" gelu forward", o5, o2)
		fillSentinel(o2)
		fillSentinel(o5)
		at(t, AVX2, func() { GELUBwd(x, dy, o2) })
		at(t, AVX512, func() { GELUBwd(x, dy, o5) })
		nanSame(o5, o2)
		bitsEqual(t, name+" gelu backward", o5, o2)
		for _, f := range []func(){f1, f2, f3, f4} {
			f()
		}
	}
}

// nanSame sets got[i] to want[i] where both are NaN: which NaN (its payload) is not part of
// the contract.
func nanSame(want, got []float32) {
	for i := range want {
		if want[i] != want[i] && got[i] != got[i] {
			got[i] = want[i]
		}
	}
}

// BenchmarkMaxPool: resnet18's 3x3 stride-2 max pooling of its stem's output on 64x64
// images at batch 16 (1024 planes of 32x32), the search and the gradient's scatter, at each
// level the CPU has; ns/op is one pass over every plane.
func BenchmarkMaxPool(b *testing.B) {
	g := ConvGeom{C: 1, H: 32, W: 32, KH: 3, KW: 3, SH: 2, SW: 2, PH: 1, PW: 1, DH: 1, DW: 1, OH: 16, OW: 16}
	const planes, P, hw = 16 * 64, 16 * 16, 32 * 32
	rng := rand.New(rand.NewSource(1))
	x, y, dx := make([]float32, planes*hw), make([]float32, planes*P), make([]float32, planes*hw)
	fillRand(rng, x)
	arg := make([]int32, planes*P)
	for _, l := range []Level{AVX2, AVX512} {
		if Supported(l) != nil {
			continue
		}
		b.Run("search/"+l.String(), func(b *testing.B) {
			at(b, l, func() {
				for range b.N {
					MaxPoolSearch(&g, x, y, arg, 0, planes)
				}
			})
		})
		b.Run("scatter/"+l.String(), func(b *testing.B) {
			at(b, l, func() {
				MaxPoolSearch(&g, x, y, arg, 0, planes)
				b.ResetTimer()
				for range b.N {
					MaxPoolScatter(arg, y, dx, 0, planes, P, hw)
				}
			})
		})
	}
}
