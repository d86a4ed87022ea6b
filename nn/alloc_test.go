package nn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// WithGradAllocator: the model's gradient buffer is the allocator's memory, every
// parameter's Grad views it, and a program's backward writes the same gradients there as
// into a heap buffer. Allocator failures and wrong lengths are errors.
func TestWithGradAllocator(t *testing.T) {
	var mine []float32
	alloc := func(n int) ([]float32, error) {
		mine = make([]float32, n+8)[4 : 4+n] // memory the model could not have made itself
		return mine, nil
	}
	m, err := NewModel(smallNet(), WithSeed(2), WithGradAllocator(alloc))
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.SliceData(m.Params.Grad) != unsafe.SliceData(mine) || len(m.Params.Grad) != len(mine) {
		t.Fatal("ParamSet.Grad is not the allocator's buffer")
	}
	for _, p := range m.Params.Params {
		if unsafe.SliceData(p.Grad) != &mine[p.Offset] {
			t.Fatalf("%s: Grad does not view the allocator's buffer", p.Name)
		}
	}
	ref, err := NewModel(smallNet(), WithSeed(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, mm := range []*Model{m, ref} {
		p, err := Compile(mm, classify(3, 6, 5))
		if err != nil {
			t.Fatal(err)
		}
		fill(t, p, 3)
		if err := p.Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(mine, ref.Params.Grad) || slices.Max(ref.Params.Grad) == 0 {
		t.Fatal("gradients in the allocator's buffer differ from a heap buffer's")
	}
	boom := errors.New("boom")
	if _, err := NewModel(smallNet(), WithGradAllocator(func(int) ([]float32, error) { return nil, boom })); !errors.Is(err, boom) {
		t.Fatalf("failing allocator: %v", err)
	}
	if _, err := NewModel(smallNet(), WithGradAllocator(func(n int) ([]float32, error) { return make([]float32, n-1), nil })); err == nil || !strings.Contains(err.Error(), "want") {
		t.Fatalf("short buffer: %v", err)
	}
}
