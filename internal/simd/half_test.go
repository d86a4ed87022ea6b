package simd

import (
	"math"
	"math/rand"
	"sort"
	"testing"
)

// f16Values is every finite non-negative binary16 value, ascending, as float64 (exact).
func f16Values() []float64 {
	var v []float64
	for h := 0; h < 0x7c00; h++ {
		e, m := h>>10, float64(h&0x3ff)
		if e == 0 {
			v = append(v, math.Ldexp(m, -24))
		} else {
			v = append(v, math.Ldexp(1+m/1024, e-15))
		}
	}
	return v
}

// refF16 rounds x to binary16 by searching the table of every value: nearest, ties to the
// even bit pattern, ±Inf from 65520 (the midpoint between 65504 and 2^16) up.
func refF16(vals []float64, x float32) float64 {
	a := math.Abs(float64(x))
	s := math.Copysign(1, float64(x))
	if a >= 65520 {
		return s * math.Inf(1)
	}
	i := sort.SearchFloat64s(vals, a) // vals[i] >= a
	if i == len(vals) || vals[i] == a {
		return s * vals[min(i, len(vals)-1)]
	}
	lo, hi := vals[i-1], vals[i]
	switch {
	case a-lo < hi-a:
		return s * lo
	case a-lo > hi-a:
		return s * hi
	case (i-1)%2 == 0: // the pattern of lo is i-1
		return s * lo
	}
	return s * hi
}

// refBF16 rounds x to bfloat16 in float64: of the two bfloat16 neighbours (the truncated
// pattern and the next), the nearer, ties to the even pattern.
func refBF16(x float32) float64 {
	b := math.Float32bits(x)
	lo := b & 0xffff0000
	hi := lo + 0x10000
	xl, xh := float64(math.Float32frombits(lo)), float64(math.Float32frombits(hi))
	if hi&0x7f800000 == 0x7f800000 { // the next pattern is Inf
		xh = math.Copysign(math.Inf(1), float64(x))
		// Beyond the largest finite value the midpoint to 2^128 decides.
		d := math.Abs(float64(x)) - math.Abs(xl)
		half := math.Ldexp(1, 127-7) / 2 // half the spacing of the top binade
		if d > half || d == half && lo&0x10000 != 0 {
			return xh
		}
		return xl
	}
	a := float64(x)
	dl, dh := math.Abs(a-xl), math.Abs(xh-a)
	if dl < dh || dl == dh && lo&0x10000 == 0 {
		return xl
	}
	return xh
}

// testFloats are random values over the whole float32 range, values around binary16's
// subnormals and overflow, exact midpoints of both formats, zeros, Infs and NaNs.
func testFloats(rng *rand.Rand, vals []float64) []float32 {
	xs := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0x7f800001), math.Float32frombits(0xff812345),
		65504, 65519.99, 65520, 65536, -65520, 1e-8, 2.98e-8, 5.96e-8, math.MaxFloat32, -math.MaxFloat32,
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7fffff), math.Float32frombits(1)}
	for range 20000 {
		xs = append(xs, math.Float32frombits(rng.Uint32()))
		xs = append(xs, float32(rng.NormFloat64()*math.Pow(2, float64(rng.Intn(40)-30))))
		i := rng.Intn(len(vals) - 1)
		mid := float32((vals[i] + vals[i+1]) / 2) // exact in float32
		xs = append(xs, mid, -mid, math.Float32frombits(rng.Uint32()&0xffff0000|0x8000))
	}
	return xs
}

func sameF32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestHalfScalarsMatchReference: the scalar narrowings equal the table and float64
// references on every test value (NaN: a quiet NaN of the same sign), and widening then
// narrowing every 16-bit pattern gives it back (NaNs made quiet).
func TestHalfScalarsMatchReference(t *testing.T) {
	vals := f16Values()
	for _, x := range testFloats(rand.New(rand.NewSource(1)), vals) {
		if x != x {
			h, b := F16FromF32(x), BF16FromF32(x)
			if h&0x7e00 != 0x7e00 || b&0x7fc0 != 0x7fc0 || h>>15 != uint16(math.Float32bits(x)>>31) {
				t.Fatalf("NaN %#x -> f16 %#x bf16 %#x, want quiet NaNs", math.Float32bits(x), h, b)
			}
			continue
		}
		if got, want := float64(F16ToF32One(F16FromF32(x))), refF16(vals, x); got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("f16(%g = %#x) = %g, want %g", x, math.Float32bits(x), got, want)
		}
		if got, want := float64(BF16ToF32One(BF16FromF32(x))), refBF16(x); got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("bf16(%g = %#x) = %g, want %g", x, math.Float32bits(x), got, want)
		}
	}
	for p := range 1 << 16 {
		h := uint16(p)
		wantF16, wantBF16 := h, h
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			wantF16 |= 0x200
		}
		if h&0x7f80 == 0x7f80 && h&0x7f != 0 {
			wantBF16 |= 0x40
		}
		if got := F16FromF32(F16ToF32One(h)); got != wantF16 {
			t.Fatalf("f16 %#x round trip: %#x", h, got)
		}
		if got := BF16FromF32(BF16ToF32One(h)); got != wantBF16 {
			t.Fatalf("bf16 %#x round trip: %#x", h, got)
		}
		if h&0x7c00 != 0x7c00 {
			v := vals[h&0x7fff]
			if h&0x8000 != 0 {
				v = -v
			}
			if got := F16ToF32One(h); float64(got) != v || math.Signbit(float64(got)) != (h&0x8000 != 0) {
				t.Fatalf("f16 %#x = %g, want %g", h, got, v)
			}
		}
	}
}

// TestHalfSlicesMatchScalars: at every SIMD level the slice conversions equal the scalar
// functions bit for bit, on lengths around the vector widths and minLen, and write nothing
// past len(src).
func TestHalfSlicesMatchScalars(t *testing.T) {
	xs := testFloats(rand.New(rand.NewSource(2)), f16Values())
	eachLevel(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 100, 1000, len(xs) - 1} {
			src := xs[len(xs)-n-1 : len(xs)-1]
			for _, c := range []struct {
				name   string
				narrow func([]uint16, []float32)
				widen  func([]float32, []uint16)
				one    func(float32) uint16
				back   func(uint16) float32
			}{
				{"bf16", F32ToBF16, BF16ToF32, BF16FromF32, BF16ToF32One},
				{"f16", F32ToF16, F16ToF32, F16FromF32, F16ToF32One},
			} {
				h := make([]uint16, n+1)
				h[n] = 0xabcd
				c.narrow(h, src)
				for i, x := range src {
					if want := c.one(x); h[i] != want {
						t.Fatalf("%s n=%d: narrow [%d] %#x = %#x, want %#x", c.name, n, i, math.Float32bits(x), h[i], want)
					}
				}
				f := make([]float32, n+1)
				f[n] = 42
				c.widen(f, h[:n])
				for i := range n {
					if want := c.back(h[i]); !sameF32(f[i], want) {
						t.Fatalf("%s n=%d: widen [%d] %#x = %#x, want %#x", c.name, n, i, h[i], math.Float32bits(f[i]), math.Float32bits(want))
					}
				}
				if h[n] != 0xabcd || f[n] != 42 {
					t.Fatalf("%s n=%d: wrote past the end", c.name, n)
				}
			}
		}
	})
}
