package optim

import (
	"testing"
)

// BenchmarkSGDMomentum steps SGD with momentum over resnet18's parameter count (11.7M) on
// one worker, the update a training step of bench-models and bench-ddp pays.
func BenchmarkSGDMomentum(b *testing.B) {
	for _, wd := range []float64{0, 1e-4} {
		name := "wd0"
		if wd != 0 {
			name = "wd"
		}
		b.Run(name, func(b *testing.B) {
			const n = 11_689_512
			p := struct{ Data, Grad []float32 }{make([]float32, n), make([]float32, n)}
			for i := range p.Grad {
				p.Grad[i] = float32(i%13) * 1e-3
			}
			o, err := NewSGD([]Segment{{Name: "w", Data: p.Data, Grad: p.Grad, WeightDecay: wd}}, 0.01, WithMomentum(0.9), WithWorkers(1, 1))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(5 * 4 * n) // read p, g, buf; write p, buf
			for b.Loop() {
				if err := o.Step(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
