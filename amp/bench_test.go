package amp

import (
	"context"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// BenchmarkTrainStep times one training step of the test conv net at 16x16, batch 16, in
// float32 and under bf16/fp16 autocast (go run ./bench/amp measures resnet18).
func BenchmarkTrainStep(b *testing.B) {
	for _, tc := range []struct {
		name   string
		policy *Policy
	}{{"fp32", nil}, {"bf16", Autocast(BF16)}, {"fp16", Autocast(FP16)}} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := nn.NewModel(convNet(), nn.WithSeed(1))
			if err != nil {
				b.Fatal(err)
			}
			var opts []nn.BuildOption
			if tc.policy != nil {
				opts = append(opts, nn.WithAutocast(tc.policy))
			}
			p, err := nn.Compile(m, classifier(16, 3, 16, 16, 1, nil), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			fillInputs(b, p, 1, 10)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m.Params.ZeroGrad()
				if err := p.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundSlice32 is the rounding pass alone, per element.
func BenchmarkRoundSlice32(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 1.0001e-3
	}
	dst := make([]float32, len(src))
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for i := 0; i < b.N; i++ {
				RoundSlice32(f, dst, src)
			}
		})
	}
}
