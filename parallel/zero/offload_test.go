package zero

import (
	"context"
	"github.com/gorgonia-parallel/gp/internal/procstatus"
	"github.com/gorgonia-parallel/gp/train"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// trainMLP runs 2 steps of a width-w MLP on one rank with opts and returns the engine.
func trainMLP(t *testing.T, w int, opts ...Option) *Engine {
	t.Helper()
	groups := comm.NewLocalGroups(1)
	t.Cleanup(func() { closeAll(groups) })
	m, err := nn.NewModel(mlp(w), nn.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(context.Background(), m, groups[0], append([]Option{WithWeightDecay(wd)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	p, err := e.Compile(regress(4, w))
	if err != nil {
		t.Fatal(err)
	}
	for s := range 2 {
		e.ZeroGrad()
		if err := feedMLP(p, s, 4, w); err != nil {
			t.Fatal(err)
		}
		if err := train.RunStep(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// Disk offload: the optimizer state lives in files under the directory (8 bytes per
// parameter), none of it is in the process between steps (mincore), the process's VmRSS
// drops by its size (within 15%) when it is released after an optimizer step, and the
// parameters are bit-identical to the in-memory cpu offload (same fused kernel).
func TestDiskOffload(t *testing.T) {
	needMmap(t)
	const w = 1024
	cpu := trainMLP(t, w, WithOffload(OffloadCPU, 2), WithOptimizer(AdamW(lr, optim.WithWorkers(2, 1<<14))))
	dir := t.TempDir()
	disk := trainMLP(t, w, WithOffload(OffloadDisk, 2), WithOffloadDir(dir), WithOptimizer(AdamW(lr, optim.WithWorkers(2, 1<<14))))
	mem := disk.Memory()
	if mem.FileBytes != mem.StateBytes || mem.StateBytes != 8*int64(mem.Psi) {
		t.Fatalf("state %d B, in files %d B, want 8Ψ = %d", mem.StateBytes, mem.FileBytes, 8*mem.Psi)
	}
	if mem.FileResidentBytes != 0 || mem.TransientResidentBytes != 0 {
		t.Fatalf("between steps: %v", mem)
	}
	var onDisk int64
	files, _ := filepath.Glob(filepath.Join(dir, "rank0-*.f32"))
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		onDisk += st.Size()
	}
	if onDisk < mem.StateBytes {
		t.Fatalf("files %v hold %d B, state is %d B", files, onDisk, mem.StateBytes)
	}
	// One more optimizer step pages the whole state in; releasing it must give it back.
	if err := disk.Optimizer().Step(); err != nil {
		t.Fatal(err)
	}
	in, err := procstatus.Bytes("VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	resident := disk.Memory().FileResidentBytes
	if err := disk.releaseState(); err != nil {
		t.Fatal(err)
	}
	out, err := procstatus.Bytes("VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	drop := in - out
	t.Logf("Ψ=%d: optimizer state %d B in %d files; resident after the step %d B; VmRSS %d → %d B (drop %d B = %.2f × state)",
		mem.Psi, mem.StateBytes, len(files), resident, in, out, drop, float64(drop)/float64(mem.StateBytes))
	if math.Abs(float64(drop-mem.StateBytes)) > 0.15*float64(mem.StateBytes) {
		t.Errorf("VmRSS dropped by %d B, optimizer state is %d B", drop, mem.StateBytes)
	}
	if err := cpu.Optimizer().Step(); err != nil {
		t.Fatal(err)
	}
	a, err := cpu.GatherParams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := disk.GatherParams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("element %d: disk %g, cpu %g", i, b[i], a[i])
		}
	}
	dm := trainMLP(t, 256, WithOffload(OffloadDisk, 1), WithOffloadDir(t.TempDir()), DiskMaster(), WithOptimizer(AdamW(lr, optim.WithWorkers(1, 1<<15))))
	if m := dm.Memory(); m.FileBytes != m.StateBytes+m.MasterBytes || m.FileResidentBytes != 0 {
		t.Errorf("DiskMaster: %v", m)
	}
}

// The fused sharded AdamW is bit-identical to optim's AdamW on the same segments, for any
// number of workers.
func TestShardAdamWMatchesOptim(t *testing.T) {
	a := trainMLP(t, 128, WithOptimizer(AdamW(lr, optim.WithWorkers(3, 100))))
	b := trainMLP(t, 128, WithOptimizer(Optim(adamWSegs)))
	pa, _ := a.GatherParams(context.Background())
	pb, _ := b.GatherParams(context.Background())
	for i := range pa {
		if math.Float32bits(pa[i]) != math.Float32bits(pb[i]) {
			t.Fatalf("element %d: fused %g, optim %g", i, pa[i], pb[i])
		}
	}
}
