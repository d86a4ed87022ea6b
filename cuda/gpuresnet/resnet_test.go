package gpuresnet

import (
	"context"
	"os"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

// On the fake driver the kernels do not run, so this checks the plumbing: every parameter is
// found by name, every op accepts the shapes the architecture produces (basic and bottleneck
// blocks, downsampling), the gradients cover the flat buffer, and the allocator is reused
// from the second step on.
func TestStepPlumbingOnFake(t *testing.T) {
	cudatest.Require(t)
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, kind := range []resnet.BlockKind{resnet.Basic, resnet.Bottleneck} {
		root, err := resnet.New(resnet.Config{Block: kind, Layers: [4]int{1, 2, 1, 1}, Widths: [4]int{4, 8, 8, 8}, StemWidth: 4, NumClasses: 5})
		if err != nil {
			t.Fatal(err)
		}
		m, err := nn.NewModel(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range []cuda.DType{cuda.Float32} {
			r, err := New(d, m, WithAutocast(dt))
			if err != nil {
				t.Fatal(err)
			}
			shape := []int{2, 3, 32, 32}
			x := make([]float32, 2*3*32*32)
			for step := range 2 {
				res, err := r.Step(context.Background(), x, shape, []int32{1, 4}, true)
				if err != nil {
					t.Fatalf("%v step %d: %v", kind, step, err)
				}
				if len(res.Logits) != 10 {
					t.Fatalf("logits %d", len(res.Logits))
				}
				if err := r.SGD(0.1, 0.9); err != nil {
					t.Fatal(err)
				}
			}
			g := make([]float32, len(m.Params.Grad))
			if err := r.Grads(context.Background(), g); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Buffer(context.Background(), "layer1.0.bn1.running_mean"); err != nil {
				t.Fatal(err)
			}
			r.Free()
		}
	}
	if st := d.MemoryStats(); st.Hits == 0 {
		t.Errorf("no allocator reuse: %+v", st)
	}
}

func TestRejectsOtherModels(t *testing.T) {
	if _, err := New(nil, &nn.Model{Root: &nn.Linear{In: 1, Out: 1}}); err == nil {
		t.Fatal("accepted a non-ResNet model")
	}
}
