package tape_test

import (
	"context"
	"fmt"
	"hash"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chewxy/hm"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// permute3 is an op of a package the executor does not know (this test's): a permute of a
// 3-D float32 tensor that describes itself as desc (ops.Describer); Do computes the
// permute by perm whatever desc says.
type permute3 struct {
	in, perm []int
	desc     ops.Desc
}

func (op *permute3) Describe() ops.Desc { return op.desc }

func (op *permute3) out() []int {
	return []int{op.in[op.perm[0]], op.in[op.perm[1]], op.in[op.perm[2]]}
}

func (op *permute3) Arity() int { return 1 }
func (op *permute3) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(G.TensorType{Dims: 3, Of: a}, G.TensorType{Dims: 3, Of: a})
}
func (op *permute3) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.out(), nil }
func (op *permute3) Do(v ...G.Value) (G.Value, error) {
	x := v[0].Data().([]float32)
	out := op.out()
	y := make([]float32, len(x))
	idx := make([]int, 3)
	for i := range y {
		r := i
		for a := 2; a >= 0; a-- {
			idx[op.perm[a]] = r % out[a]
			r /= out[a]
		}
		y[i] = x[(idx[0]*op.in[1]+idx[1])*op.in[2]+idx[2]]
	}
	return tensor.New(tensor.WithShape(out...), tensor.WithBacking(y)), nil
}

// DiffWRT: x is an input, no gradient flows to it (the test's learnable is w).
func (op *permute3) DiffWRT(int) []bool { return []bool{false} }
func (op *permute3) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("permute3 has no gradient")
}
func (op *permute3) ReturnsPtr() bool      { return false }
func (op *permute3) CallsExtern() bool     { return false }
func (op *permute3) OverwritesInput() int  { return -1 }
func (op *permute3) WriteHash(h hash.Hash) { fmt.Fprintf(h, "permute3%p", op) }
func (op *permute3) Hashcode() uint32      { return ops.HashOf(op) }
func (op *permute3) String() string        { return fmt.Sprintf("permute3%v", op.perm) }

// An op of any package that describes itself in nn/ops's vocabulary runs on the device
// through ops.Describe, with no registration and no import of its package by the executor:
// loss = Σ permute(x) ⊙ w, whose gradient is permute(x) exactly (a copy, so compared
// bit for bit); a description the executor cannot run is a Compile error naming why.
func TestDescriberLowered(t *testing.T) {
	d := device(t)
	in, perm := []int{2, 3, 4}, []int{2, 0, 1}
	out := []int{4, 2, 3}
	cases := []struct {
		name    string
		desc    ops.Desc
		wantErr string
	}{
		{"permute", ops.Desc{Kind: ops.KindPermute, In: in, Out: out, Perm: perm}, ""},
		{"not a permutation", ops.Desc{Kind: ops.KindPermute, In: in, Out: out, Perm: []int{2, 0, 0}}, "not a permutation"},
		{"a kind without a kernel", ops.Desc{Kind: ops.Kind(1 << 20), In: in, Out: out}, "has no device kernel"},
	}
	xv := make([]float32, prod(in))
	for i := range xv {
		xv[i] = float32(i)*0.25 - 2
	}
	wv := make([]float32, prod(out))
	for i := range wv {
		wv[i] = float32(i%5) - 1.5
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op := &permute3{in: in, perm: perm, desc: c.desc}
			build := func(b *nn.Builder) (*G.Node, error) {
				x, err := b.Input("x", in...)
				if err != nil {
					return nil, err
				}
				w := G.NewTensor(b.Graph, tensor.Float32, 3, G.WithShape(out...), G.WithName("w"),
					G.WithValue(tensor.New(tensor.WithShape(out...), tensor.WithBacking(slices.Clone(wv)))))
				wu, err := b.Learnable(w)
				if err != nil {
					return nil, err
				}
				y, err := G.ApplyOp(op, x)
				if err != nil {
					return nil, err
				}
				return G.Sum(must(G.HadamardProd(y, wu)))
			}
			mc, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			md, err := nn.NewGraphModel(build)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := tape.Compile(d, md, build)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), op.String()) {
					t.Fatalf("Compile: %v, want an error naming %s and %q", err, op, c.wantErr)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			cpu, err := nn.Compile(mc, build)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			ctx := context.Background()
			for _, p := range []train.Program{cpu, dev} {
				if err := p.SetInput("x", xv); err != nil {
					t.Fatal(err)
				}
				if err := p.Run(ctx); err != nil {
					t.Fatal(err)
				}
			}
			lc, _ := cpu.LossValue()
			ld, _ := dev.LossValue()
			if rl := maxRel([]float32{ld}, []float32{lc}); rl > opTol {
				t.Errorf("loss %v, cpu %v: %.3g relative (tolerance %g)", ld, lc, rl, opTol)
			}
			want, err := op.Do(tensor.New(tensor.WithShape(in...), tensor.WithBacking(slices.Clone(xv))))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(md.Params.Grad, want.Data().([]float32)) || !slices.Equal(mc.Params.Grad, md.Params.Grad) {
				t.Fatalf("gradient of w: device %v, cpu %v, want permute(x) %v", md.Params.Grad, mc.Params.Grad, want.Data())
			}
		})
	}
}

// The executor lowers ops; it knows no model: no package under models/ is among its
// dependencies (a model's ops reach it as ops.Describers). Skipped where the go command is
// not installed (the GPU check's machine).
func TestImportsNoModel(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goCmd, "list", "-deps", "github.com/gorgonia-parallel/gp/cuda/tape").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/gorgonia-parallel/gp/nn/ops") {
		t.Fatalf("go list -deps lists %d packages without nn/ops: not the executor's dependencies", len(deps))
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/gorgonia-parallel/gp/models") {
			t.Errorf("cuda/tape depends on %s", p)
		}
	}
}
