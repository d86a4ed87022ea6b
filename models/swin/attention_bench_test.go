package swin

import (
	"fmt"
	"math/rand"
	"testing"

	"gorgonia.org/tensor"
)

// BenchmarkWindowAttention times window attention's forward and backward ops (attnOp and
// attnGradOp, float32) at swin_t's shapes for batch 8 at 224x224: each stage's windows,
// heads and channels, shifted (masked) or not. One iteration is one forward and one
// backward; the ns/op of a run at one thread is what the stage's blocks spend in attention
// per block and step:
//
//	GOMAXPROCS=1 go test ./models/swin -run '^$' -bench WindowAttention -benchtime 20x
func BenchmarkWindowAttention(b *testing.B) {
	for _, s := range []struct {
		stage, side, heads, c int
		shifted               bool
	}{
		{1, 56, 3, 96, true}, {2, 28, 6, 192, true}, {3, 14, 12, 384, true}, {3, 14, 12, 384, false}, {4, 7, 24, 768, false},
	} {
		b.Run(fmt.Sprintf("stage%d_shifted=%v", s.stage, s.shifted), func(b *testing.B) {
			const batch, win = 8, 7
			shift := 0
			if s.shifted {
				shift = win / 2
			}
			g := newWindowGeom(s.side, s.side, win, shift)
			n := win * win
			bw := batch * g.windows()
			rel := relativePositionIndex(win)
			tRows := (2*win - 1) * (2*win - 1)
			rng := rand.New(rand.NewSource(1))
			randT := func(shape ...int) *tensor.Dense {
				t := tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
				for i, d := 0, t.Data().([]float32); i < len(d); i++ {
					d[i] = float32(rng.NormFloat64())
				}
				return t
			}
			qkv, tab, dy := randT(bw, n, 3*s.c), randT(tRows, s.heads), randT(bw, n, s.c)
			fwd := &attnOp{opBase: newOpBase("WindowAttention"), windowAttn: windowAttn{heads: s.heads, n: n, c: s.c, relIdx: rel, nW: g.windows(), mask: g.mask()}, bw: bw, tRows: tRows}
			bwd := &attnGradOp{opBase: newOpBase("WindowAttentionGrad"), fwd: fwd}
			run := func() {
				if _, err := fwd.Do(qkv, tab); err != nil {
					b.Fatal(err)
				}
				if _, err := bwd.Do(qkv, dy); err != nil {
					b.Fatal(err)
				}
			}
			run()
			b.ResetTimer()
			for range b.N {
				run()
			}
		})
	}
}
