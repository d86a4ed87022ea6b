package gpuswin

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

// On the fake driver the kernels do not run (cuda/gpucheck compares the numbers on the
// emulator), so this checks the plumbing of a three-stage model: every parameter and index
// buffer is found by name, every op accepts the shapes of odd and padded maps (15x15 tokens
// padded to 21 and shifted, 8x8 padded to 14, 4x4 under one unshifted window), the gradients
// cover the flat buffer, the RNG advances by one stream per non-zero DropPath, and the
// allocator and the index caches are reused from the second step on.
func TestStepPlumbingOnFake(t *testing.T) {
	cudatest.Require(t)
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	root, err := swin.New(swin.Config{EmbedDim: 4, Depths: []int{1, 2, 1}, Heads: []int{1, 2, 4}, StochasticDepth: 0.2, NumClasses: 3})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(root)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(d, m)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	shape := []int{2, 3, 60, 60}
	x := make([]float32, 2*3*60*60)
	ctx := context.Background()
	var cached int
	for step := range 2 {
		_, before := m.RNG.State()
		res, err := s.Step(ctx, x, shape, []int32{1, 2}, true)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if len(res.Logits) != 6 {
			t.Fatalf("logits %d, want 6", len(res.Logits))
		}
		if _, after := m.RNG.State(); after-before != 6 { // 4 blocks, the first with p = 0
			t.Errorf("step %d drew %d drop-path streams, want 6", step, after-before)
		}
		if err := s.SGD(0.1, 0.9); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			cached = len(s.geom)
		} else if len(s.geom) != cached {
			t.Errorf("index cache grew from %d to %d on the second step", cached, len(s.geom))
		}
	}
	if _, err := s.Eval(ctx, x, shape); err != nil {
		t.Fatal(err)
	}
	g := make([]float32, len(m.Params.Grad))
	if err := s.Grads(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := s.Grads(ctx, g[1:]); err == nil {
		t.Error("Grads accepted a buffer of the wrong size")
	}
	if _, err := s.Step(ctx, x[:2*3*2*2], []int{2, 3, 2, 2}, []int32{0, 1}, false); err == nil {
		t.Error("a 2x2 image (smaller than a patch) was accepted")
	}
	if st := d.MemoryStats(); st.Hits == 0 {
		t.Errorf("no allocator reuse: %+v", st)
	}
}

func TestRejectsOtherModels(t *testing.T) {
	if _, err := New(nil, &nn.Model{Root: &nn.Linear{In: 1, Out: 1}}); err == nil {
		t.Fatal("accepted a non-Swin model")
	}
}

// The drop-path scales are the CPU op's: ops.DropPath on rows of ones, run several times
// (one stream each), against dropStreams from the same seed.
func TestDropPathMatchesOps(t *testing.T) {
	const batch, p, seed = 64, 0.4, 77
	g := G.NewGraph()
	ones := make([]float32, batch*3)
	for i := range ones {
		ones[i] = 1
	}
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(batch, 3), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(batch, 3), tensor.WithBacking(ones))))
	rng := ops.NewRNG(seed)
	y, err := ops.DropPath(x, p, rng, true)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	mine := newDropStreams(ops.NewRNG(seed))
	dropped := 0
	for run := range 4 {
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		got := y.Value().Data().([]float32)
		want, err := mine.next(batch, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if got[3*i] != w {
				t.Fatalf("run %d sample %d: ops scale %v, gpuswin %v", run, i, got[3*i], w)
			}
			if w == 0 {
				dropped++
			}
		}
		vm.Reset()
	}
	if dropped == 0 || dropped == 4*batch {
		t.Fatalf("%d of %d samples dropped: the check is vacuous", dropped, 4*batch)
	}
	mine.commit()
	if _, c := mine.rng.State(); c != 4 {
		t.Errorf("counter %d after 4 draws", c)
	}
}

// Partition and reverse are inverse on the map's rows (padding rows read nothing), the mask
// is zero where the window does not straddle a shift boundary, and a window covering the
// padded map does not shift.
func TestGeometry(t *testing.T) {
	for _, c := range []struct{ h, w, shift int }{{14, 14, 3}, {9, 10, 3}, {7, 7, 3}, {5, 12, 3}, {14, 14, 0}} {
		g := swin.NewGeometry(c.h, c.w, 7, c.shift)
		part, rev := g.Partition(2), g.Reverse(2)
		for r, j := range rev {
			if part[j] != int32(r) {
				t.Fatalf("%+v: row %d goes to window row %d, which reads %d", c, r, j, part[j])
			}
		}
		pad := 0
		for _, j := range part {
			if j < 0 {
				pad++
			}
		}
		padH, padW := g.Padded()
		shiftH, shiftW := g.Shift()
		nWh, nWw := g.WindowsPerAxis()
		if want := 2 * (padH*padW - c.h*c.w); pad != want {
			t.Errorf("%+v: %d padding rows, want %d", c, pad, want)
		}
		if padH == 7 && shiftH != 0 || padW == 7 && shiftW != 0 {
			t.Errorf("%+v: shift %d,%d under a window covering the map", c, shiftH, shiftW)
		}
		if !g.Shifted() {
			continue
		}
		m := g.Mask()
		if n := 49 * 49; slices.ContainsFunc(m[:n], func(v float32) bool { return v != 0 }) && nWh > 1 && nWw > 1 {
			t.Errorf("%+v: the first window is masked", c)
		}
		if !slices.Contains(m, -100) {
			t.Errorf("%+v: shifted, but nothing masked", c)
		}
	}
}
