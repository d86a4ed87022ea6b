package transforms_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/data/transforms"
)

// BenchmarkTrain224 runs decode + Train(224) on a 500x375 JPEG from the bench cache, if present.
func BenchmarkTrain224(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "..", "bench", "data", ".cache", "jpeg500x375", "class_0", "00000.jpg"))
	if err != nil {
		b.Skip("run make bench-data first to generate the JPEGs")
	}
	p := transforms.Train(224)
	dst := make([]float32, 3*224*224)
	var s transforms.Scratch
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		if _, _, err := p.Run(data, rng, &s, dst); err != nil {
			b.Fatal(err)
		}
	}
}
