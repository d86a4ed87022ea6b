package ops

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/nn/gradcheck"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// threadNet is a small ResNet-like network whose layers take every multi-threaded path of
// the kernels (the sizes are the smallest that still split): a 3x3 convolution that runs
// as an implicit convolution (Note [Implicit convolution]; with it off, with kept columns:
// per-image forward and data gradient, a one-GEMM filter gradient), a 1x1
// stride-1 convolution on 24x24 (per-image, with the workers' filter-gradient sums added
// at the end), a strided per-image 3x3 (its filter-gradient GEMM split in blocks), a 3x3
// and a 1x1 on 3x3 outputs (the batched path, GEMMs split in blocks), BatchNorm+ReLU and
// the elementwise kernels on 110k elements, max pooling, AddReLU, a linear head and
// cross-entropy. It returns the loss, the logits and the
// gradients of the input and of every parameter, in that order.
func threadNet(t *testing.T) (*G.ExprGraph, G.Nodes) {
	t.Helper()
	rng := rand.New(rand.NewSource(11))
	g := G.NewGraph()
	dt := tensor.Float32
	const n = 6
	x := cvIn(g, dt, rng, "x", n, 3, 24, 24)
	w1 := cvIn(g, dt, rng, "w1", 32, 3, 3, 3)
	gamma := cvIn(g, dt, rng, "gamma", 32)
	beta := cvIn(g, dt, rng, "beta", 32)
	w2 := cvIn(g, dt, rng, "w2", 32, 32, 1, 1)
	w3 := cvIn(g, dt, rng, "w3", 64, 32, 3, 3)
	b3 := cvIn(g, dt, rng, "b3", 64) // a bias before a BatchNorm would have a zero gradient
	w4 := cvIn(g, dt, rng, "w4", 128, 64, 3, 3)
	w5 := cvIn(g, dt, rng, "w5", 128, 128, 1, 1)
	fw := cvIn(g, dt, rng, "fw", 10, 128)
	fb := cvIn(g, dt, rng, "fb", 10)
	labels := G.NewTensor(g, dt, 1, G.WithShape(n), G.WithName("labels"),
		G.WithValue(tensor.New(tensor.WithShape(n), tensor.WithBacking([]float32{0, 3, 9, 1, 4, 7}))))
	pad1 := ConvOpts{Padding: [2]int{1, 1}}
	strided := ConvOpts{Stride: [2]int{2, 2}, Padding: [2]int{1, 1}}
	h := cvMust(Conv2d(x, w1, nil, pad1))                              // [6,32,24,24]
	h = cvMust(BatchNormReLU(h, gamma, beta, newBNState(32, true)))    // per channel sums
	h = cvMust(AddReLU(h, cvMust(Conv2d(h, w2, nil, ConvOpts{}))))     // 1x1 on 24x24
	h = cvMust(MaxPool2d(h, [2]int{3, 3}, [2]int{2, 2}, [2]int{1, 1})) // [6,32,12,12]
	h = cvMust(Conv2d(h, w3, b3, strided))                             // [6,64,6,6]
	h = cvMust(Conv2d(h, w4, nil, strided))                            // [6,128,3,3]
	h = cvMust(AddReLU(h, cvMust(Conv2d(h, w5, nil, ConvOpts{}))))     // 1x1 on 3x3
	logits := cvMust(Linear(cvMust(Flatten(cvMust(AdaptiveAvgPool2d1(h)))), fw, fb))
	loss := cvMust(CrossEntropy(logits, labels, 0))
	grads, err := G.Grad(loss, x, w1, gamma, beta, w2, w3, b3, w4, w5, fw, fb)
	if err != nil {
		t.Fatal(err)
	}
	return g, append(G.Nodes{loss, logits}, grads...)
}

// runThreadNet runs threadNet once at the given thread count and returns its outputs.
func runThreadNet(t *testing.T, threads int) [][]float64 {
	t.Helper()
	setTestThreads(t, threads)
	g, outs := threadNet(t)
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	return cvValues(outs)
}

// TestKernelsAcrossThreadCounts runs one network at 1, 2 and 3 threads (the last two on
// ForkJoin's pool, whatever the environment's thread count). At a given thread count two
// runs must give the same bits: every split is static. Across thread counts only the
// order of float32 sums changes (the filter gradients of the per-image path add the
// workers' partial sums), so the loss, logits and every gradient must agree within 1e-5
// (norm-wise relative); measured at most 2.6e-7. It runs once with the implicit
// convolution and once with it off, so that both the implicit and the GEMM paths split.
func TestKernelsAcrossThreadCounts(t *testing.T) {
	for _, path := range []string{"implicit", "GEMM path"} {
		t.Run(path, func(t *testing.T) {
			if path == "GEMM path" {
				gemmPathOnly(t)
			}
			kernelsAcrossThreadCounts(t)
		})
	}
}

func kernelsAcrossThreadCounts(t *testing.T) {
	names := []string{"loss", "logits", "x", "w1", "gamma", "beta", "w2", "w3", "b3", "w4", "w5", "fw", "fb"}
	one := runThreadNet(t, 1)
	for _, threads := range []int{2, 3} {
		t.Run(fmt.Sprint(threads), func(t *testing.T) {
			a, b := runThreadNet(t, threads), runThreadNet(t, threads)
			for i := range a {
				if !slices.Equal(a[i], b[i]) {
					t.Errorf("%s differs between two runs at %d threads", names[i], threads)
				}
				if r := gradcheck.RelNorm(a[i], one[i]); r > 1e-5 {
					t.Errorf("%s at %d threads: rel err %.3g against 1 thread", names[i], threads, r)
				}
			}
		})
	}
}
