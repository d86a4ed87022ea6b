package nn

import (
	"math"
	"math/rand"
)

// Uniform fills with U(-bound, bound).
func Uniform(bound float64) Initializer {
	return func(rng *rand.Rand, d []float32) {
		for i := range d {
			d[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
}

// Normal fills with N(0, std²).
func Normal(std float64) Initializer {
	return func(rng *rand.Rand, d []float32) {
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
	}
}

// TruncNormal fills with N(0, std²) truncated to [-2, 2] (absolute bounds), as PyTorch's
// trunc_normal_(std=std) with its default a=-2, b=2; Swin initialises its linear layers so.
func TruncNormal(std float64) Initializer {
	return func(rng *rand.Rand, d []float32) {
		for i := range d {
			for {
				v := rng.NormFloat64() * std
				if v >= -2 && v <= 2 {
					d[i] = float32(v)
					break
				}
			}
		}
	}
}

// Constant fills with v.
func Constant(v float32) Initializer {
	return func(_ *rand.Rand, d []float32) {
		for i := range d {
			d[i] = v
		}
	}
}

// KaimingNormalFanOut is kaiming_normal_(mode="fan_out", nonlinearity="relu"), torchvision
// ResNet's convolution initialisation: N(0, 2/fanOut).
func KaimingNormalFanOut(fanOut int) Initializer {
	return Normal(math.Sqrt(2 / float64(fanOut)))
}

// DefaultLinearInit is PyTorch's default for Linear and Conv weights and biases,
// kaiming_uniform_(a=√5), which is U(-1/√fanIn, 1/√fanIn).
func DefaultLinearInit(fanIn int) Initializer {
	if fanIn <= 0 {
		return Constant(0)
	}
	return Uniform(1 / math.Sqrt(float64(fanIn)))
}
