package tape_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// exitVar, set in TestEmulatorProcessExits' child, makes it run a graph and end through
// libc's exit.
const exitVar = "TAPE_TEST_EXIT_CHILD"

// A process whose kernels ran on the emulator's helper threads ends through libc's exit(),
// as a race-detector build's os.Exit does, instead of hanging in the emulator's static
// destructors (a condition variable its idle helpers wait on cannot be destroyed).
func TestEmulatorProcessExits(t *testing.T) {
	if realGPU {
		t.Skip("the emulator's own check")
	}
	if os.Getenv(exitVar) == "1" {
		exitChild(t)
		return
	}
	device(t) // skips without the emulator
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestEmulatorProcessExits$", "-test.count=1")
	cmd.Env = append(os.Environ(), exitVar+"=1", "GP_EMU_BLOCK_THREADS=2")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the child did not end within 2 minutes of its exit(7); output:\n%s", out)
	case !errors.As(err, &ee) || ee.ExitCode() != 7:
		t.Fatalf("child: %v, want exit status 7 (its exit(7)); output:\n%s", err, out)
	}
}

// exitChild runs a graph whose element-wise kernels span many blocks (so the emulator starts
// its helper threads), then calls libc's exit(7).
func exitChild(t *testing.T) {
	d := device(t)
	const n = 1 << 14
	build := func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("x", n)
		if err != nil {
			return nil, err
		}
		w := G.NewTensor(b.Graph, tensor.Float32, 1, G.WithShape(n), G.WithName("w"),
			G.WithValue(tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))))
		wu, err := b.Learnable(w)
		if err != nil {
			return nil, err
		}
		return G.Sum(must(G.Square(must(G.Add(x, wu)))))
	}
	m, err := nn.NewGraphModel(build)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tape.Compile(d, m, build)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	libc, err := dl.Open([]string{"libc.so.6"})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := libc.Sym("exit")
	if err != nil {
		t.Fatal(err)
	}
	dl.Call(exit, 7)
	t.Fatal("libc's exit returned")
}
