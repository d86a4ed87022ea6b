package tape

import (
	"fmt"
	"slices"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/nn/ops"
	G "gorgonia.org/gorgonia"
)

// Note [Autocast in 16 bits]
//
// On the CPU autocast is emulated (amp/doc.go): amp.Round nodes round the inputs and the
// output of each lower-precision op to bf16 or fp16 in float32 storage, and the op computes
// in float32 on the rounded values. On the device the same graph computes those ops in 16
// bits. A lower-precision op — Linear and its two gradients, Conv2d and its two gradients,
// gorgonia's matmuls (2-D, batched, matrix-vector) — whose GEMM operands are all Round nodes
// of one format (directly or through reshapes and taps) is lowered to a 16-bit computation:
//
//   - each such Round node has a 16-bit copy of its value, made once per Run however many
//     ops read it, and freed after its last 16-bit reader (a count made at Compile) or at
//     the end of the Run. When float32 ops read the Round too, its step makes the copy in
//     the pass that rounds (round_cast_*); when only 16-bit ops read it, the Round is a view
//     of its input and the first reader casts that to 16 bits (the cast rounds to nearest
//     even, as Round does): no float32 rounded value is written at all;
//   - the matmuls read the copies through cublasGemmEx / GemmStridedBatchedEx with float32
//     accumulation and float32 output; the convolutions through Conv2d16 / Conv2dBackward16:
//     im2col in 16 bits and GemmEx with float32 output, or cuDNN's 16-bit passes when the
//     op's every reader is a Round to the same format and it has no bias (cuDNN stores its
//     16-bit result, and rounding it again is the identity, so nothing changes);
//   - the output's Round, and every float32 op, run as before.
//
// A product of two bf16 (8-bit significand) or fp16 (11-bit) values is exact in float32's 24
// bits, so the 16-bit GEMMs compute the same products as the CPU's float32 GEMMs on the
// rounded values: the results differ only by the order of the float32 sums. Ops whose
// operands are not all rounded (autocast off for the module, or Swin's attention, which the
// CPU computes in float32) stay in float32.

// half is the 16-bit copy of a Round node's value during a Run.
type half struct {
	dt   cuda.DType // Float16 or BFloat16
	lazy bool       // made by the first reader from the Round's input (the Round is a view)
	t    *cuda.Tensor
	refs int // 16-bit operand reads per Run, counted at Compile
	left int // reads still to come in this Run
}

// get returns the copy for a reader whose operand is src (the Round's input under a lazy
// half), making it on the first read of a Run.
func (p *Program) get(dev *cuda.Device, h *half, src *cuda.Tensor) (*cuda.Tensor, error) {
	if h.t != nil && h.t.Ptr() != 0 { // made in this Run (a failed Run's copy was freed at its end)
		return h.t.View(0, src.Shape()...) // the reader's shape (it may read through a reshape)
	}
	if !h.lazy {
		return nil, fmt.Errorf("the 16-bit copy of an autocast operand has not been made (its Round has not run)")
	}
	t, err := dev.Alloc(h.dt, src.Shape()...)
	if err != nil {
		return nil, err
	}
	p.runOwned = append(p.runOwned, t)
	h.t, h.left = t, h.refs
	return t, dev.Cast(t, src) // rounds to nearest even: Round's bits
}

// done records one read; the last frees the copy.
func (h *half) done() {
	if h.left--; h.left == 0 && h.t != nil {
		h.t.Free()
		h.t = nil
	}
}

// lowerAutocast lowers n in 16 bits when it is a Round that 16-bit ops read, or such an op
// reading Round nodes of one format (see Note [Autocast in 16 bits]); ok is false otherwise.
func (p *Program) lowerAutocast(n *G.Node, in []*G.Node) (k *kernel, ok bool, err error) {
	if d, isAmp := amp.DescribeOp(n.Op()); isAmp {
		if !d.Round || !p.read16(n) {
			return nil, false, nil
		}
		if p.onlyRead16(n, n) && !p.isResult(n) {
			// No float32 reader: the Round is a view of its input, and the first 16-bit
			// reader of a Run casts that to 16 bits (rounding it): no float32 copy.
			p.state(n.Op()).half = &half{dt: dtype16(d.Format), lazy: true}
			return &kernel{alias: true}, true, nil
		}
		k, err := p.lowerRoundCast(n, d.Format)
		return k, true, err
	}
	idx, f, ok := p.operands16(n)
	if !ok {
		return nil, false, nil
	}
	hs := make([]*half, len(idx))
	for j, i := range idx {
		r, _, _ := p.roundOf(in[i])
		if hs[j] = p.state(r.Op()).half; hs[j] == nil {
			return nil, true, fmt.Errorf("autocast: the Round %s read in 16 bits has no 16-bit copy", r.Name())
		}
		hs[j].refs++
	}
	cast := "cast_f32_bf16" // a lazy copy's cast, made by its first reader
	if f == amp.FP16 {
		cast = "cast_f32_f16"
	}
	if d, isNN := ops.Describe(n.Op()); isNN && (d.Kind == ops.KindConv2d || d.Kind == ops.KindConv2dGradX || d.Kind == ops.KindConv2dGradW) {
		k := p.lowerConv16(n, d, f, hs)
		k.kernels = append(k.kernels, cast)
		return k, true, nil
	}
	// The float32 lowering reads its GEMM operands through views and cuda.MatMul /
	// MatMulBatched, which take 16-bit a and b (GemmEx): hand it the 16-bit copies instead.
	k, err = p.lowerNode32(n, in)
	if err != nil {
		return nil, true, err
	}
	k.kernels = append(k.kernels, cast)
	run := k.run
	k.run = func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		x16 := slices.Clone(x)
		for j, i := range idx {
			t, err := p.get(dev, hs[j], x[i])
			if err != nil {
				return err
			}
			x16[i] = t
		}
		err := run(dev, out, x16)
		for _, h := range hs {
			h.done()
		}
		return err
	}
	return k, true, nil
}

// lowerNode32 lowers a GEMM op as if autocast were off.
func (p *Program) lowerNode32(n *G.Node, in []*G.Node) (*kernel, error) {
	if d, ok := ops.Describe(n.Op()); ok {
		return p.lowerNN(n, d, in)
	}
	return lower(n, in)
}

// lowerRoundCast: the Round, and in the same pass the 16-bit copy its 16-bit readers use.
func (p *Program) lowerRoundCast(n *G.Node, f amp.Format) (*kernel, error) {
	h := &half{dt: dtype16(f)}
	name := "round_cast_f32_bf16"
	if f == amp.FP16 {
		name = "round_cast_f32_f16"
	}
	// The readers, lowered after n, find h here at Compile (release clears saved state
	// between Runs; the closures keep h).
	p.state(n.Op()).half = h
	shape := dims(n)
	return &kernel{kernels: []string{name}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		h.t.Free() // left by a Run that failed before the last reader (release freed it too)
		t, err := dev.Alloc(h.dt, shape...)
		if err != nil {
			return err
		}
		p.runOwned = append(p.runOwned, t)
		h.t, h.left = t, h.refs
		return dev.RoundCast(out, t, x[0])
	}}, nil
}

// lowerConv16: Conv2d and its gradients on the 16-bit copies (inputs x, w; w, dy; x, dy).
func (p *Program) lowerConv16(n *G.Node, d ops.Desc, f amp.Format, hs []*half) *kernel {
	g := d.Conv
	cp := cuda.Conv2dParams{StrideH: g.SH, StrideW: g.SW, PadH: g.PH, PadW: g.PW, DilH: g.DH, DilW: g.DW}
	xs, ws, ys := []int{g.N, g.C, g.H, g.W}, []int{g.Out, g.C, g.KH, g.KW}, []int{g.N, g.Out, g.OH, g.OW}
	kind, bias := d.Kind, d.Bias
	// A result whose every reader rounds it to f may be stored in 16 bits (cuDNN's passes).
	round := !bias && p.readersRound(n, f)
	k := &kernel{run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		defer func() {
			for _, h := range hs {
				h.done()
			}
		}()
		a, err := p.get(dev, hs[0], x[0])
		if err != nil {
			return err
		}
		b, err := p.get(dev, hs[1], x[1])
		if err != nil {
			return err
		}
		res := out // float32, or a 16-bit temporary widened into out
		if impl, _ := dev.ConvImplInUse(); round && impl == cuda.ConvCuDNN {
			if res, err = dev.Alloc(hs[0].dt, dims(n)...); err != nil {
				return err
			}
			defer res.Free()
		}
		switch kind {
		case ops.KindConv2dGradX: // a = w, b = dy; dx stands for x's shape
			w, dy, dx, err := views(a, ws, b, ys, res, xs)
			if err == nil {
				err = dev.Conv2dBackward16(dx, nil, dy, dx, w, cp)
			}
			if err != nil {
				return err
			}
		case ops.KindConv2dGradW: // a = x, b = dy; dw stands for w's shape
			xv, dy, dw, err := views(a, xs, b, ys, res, ws)
			if err == nil {
				err = dev.Conv2dBackward16(nil, dw, dy, xv, dw, cp)
			}
			if err != nil {
				return err
			}
		default:
			xv, w, y, err := views(a, xs, b, ws, res, ys)
			if err == nil {
				err = dev.Conv2d16(y, xv, w, cp)
			}
			if err != nil {
				return err
			}
		}
		if res != out {
			if err := dev.Cast(out, res); err != nil {
				return err
			}
		}
		if bias {
			return dev.AddBroadcast(out, out, x[2], g.Out, g.OH*g.OW, 1)
		}
		return nil
	}}
	k.kernels = []string{"im2col_x16", "col2im_f32"}
	if bias {
		k.kernels = append(k.kernels, "add_bcast_f32")
	}
	return k
}

func views(a *cuda.Tensor, as []int, b *cuda.Tensor, bs []int, c *cuda.Tensor, cs []int) (av, bv, cv *cuda.Tensor, err error) {
	if av, err = view(a, as...); err == nil {
		if bv, err = view(b, bs...); err == nil {
			cv, err = view(c, cs...)
		}
	}
	return av, bv, cv, err
}

// operands16 returns the input indices of n's GEMM operands and their format when n is a
// lower-precision op whose GEMM operands are all Round nodes of one format.
func (p *Program) operands16(n *G.Node) ([]int, amp.Format, bool) {
	var idx []int
	if d, ok := ops.Describe(n.Op()); ok {
		switch d.Kind {
		case ops.KindLinear, ops.KindLinearGradX, ops.KindLinearGradW:
			idx = []int{0, 1}
		case ops.KindConv2d, ops.KindConv2dGradX, ops.KindConv2dGradW:
			if d.Conv.Groups == 1 {
				idx = []int{0, 1}
			}
		}
	} else if n.Op() != nil && opType(n.Op()) == "gorgonia.linAlgBinOp" {
		idx = []int{0, 1}
	}
	if idx == nil {
		return nil, 0, false
	}
	in := p.inputs(n)
	var f amp.Format
	for j, i := range idx {
		if i >= len(in) {
			return nil, 0, false
		}
		_, fi, ok := p.roundOf(in[i])
		if !ok || (j > 0 && fi != f) {
			return nil, 0, false
		}
		f = fi
	}
	return idx, f, true
}

// roundOf returns the Round node that n is, or views through reshapes and taps.
func (p *Program) roundOf(n *G.Node) (*G.Node, amp.Format, bool) {
	for n.Op() != nil {
		if d, ok := amp.DescribeOp(n.Op()); ok && d.Round {
			return n, d.Format, true
		}
		in := p.inputs(n)
		if t := opType(n.Op()); (t != "gorgonia.reshapeOp" && t != "nn.tapOp") || len(in) != 1 {
			break
		}
		n = in[0]
	}
	return nil, 0, false
}

func dtype16(f amp.Format) cuda.DType {
	if f == amp.FP16 {
		return cuda.Float16
	}
	return cuda.BFloat16
}

// onlyRead16 reports whether every reader of v (r or a view of it) reads it as a 16-bit
// operand of r, directly or through views.
func (p *Program) onlyRead16(v, r *G.Node) bool {
	rs := p.readers(v)
	for _, c := range rs {
		if t := opType(c.Op()); t == "gorgonia.reshapeOp" || t == "nn.tapOp" {
			if !p.onlyRead16(c, r) {
				return false
			}
			continue
		}
		idx, _, ok := p.operands16(c)
		if !ok {
			return false
		}
		for i, x := range p.inputs(c) {
			if x == v && !slices.Contains(idx, i) {
				return false
			}
		}
	}
	return len(rs) > 0
}

// isResult reports whether n is the loss or a named output, which the host reads.
func (p *Program) isResult(n *G.Node) bool {
	if n == p.cpu.Loss {
		return true
	}
	for _, name := range p.cpu.OutputNames() {
		if p.cpu.OutputNode(name) == n {
			return true
		}
	}
	return false
}

// read16 reports whether a 16-bit op reads Round node r (directly or through views).
func (p *Program) read16(r *G.Node) bool { return p.read16Via(r, r) }

func (p *Program) read16Via(v, r *G.Node) bool {
	for _, c := range p.readers(v) {
		if idx, _, ok := p.operands16(c); ok {
			in := p.inputs(c)
			for _, i := range idx {
				if rr, _, _ := p.roundOf(in[i]); rr == r {
					return true
				}
			}
		}
		if t := opType(c.Op()); (t == "gorgonia.reshapeOp" || t == "nn.tapOp") && p.read16Via(c, r) {
			return true
		}
	}
	return false
}

// readersRound reports whether every reader of n rounds it to f (and n has readers).
func (p *Program) readersRound(n *G.Node, f amp.Format) bool {
	rs := p.readers(n)
	for _, c := range rs {
		if d, ok := amp.DescribeOp(c.Op()); !ok || !d.Round || d.Format != f {
			return false
		}
	}
	return len(rs) > 0
}

// inputs returns n's inputs in the program's graph (none for a node outside it).
func (p *Program) inputs(n *G.Node) []*G.Node {
	var in []*G.Node
	it := p.cpu.Graph().From(n.ID())
	for it != nil && it.Next() {
		in = append(in, it.Node().(*G.Node))
	}
	return in
}

// readers returns the nodes of the program's graph that read n.
func (p *Program) readers(n *G.Node) []*G.Node {
	var out []*G.Node
	g := p.cpu.Graph()
	it := g.To(n.ID())
	for it != nil && it.Next() {
		// The program's graph is a subgraph that shares the whole graph's edges: keep
		// the readers it holds (Node gives a nil *G.Node, not a nil interface, for the
		// others).
		c := it.Node().(*G.Node)
		if in, _ := g.Node(c.ID()).(*G.Node); in != nil {
			out = append(out, c)
		}
	}
	return out
}

// lowerAmp: Round to the autocast format, and the loss scaling by the scaler's current scale.
func lowerAmp(d amp.OpDesc) (*kernel, error) {
	if d.Round {
		f := cuda.BF16
		name := "round_bf16_f32"
		if d.Format == amp.FP16 {
			f, name = cuda.FP16, "round_f16_f32"
		}
		return &kernel{kernels: []string{name}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
			return dev.Round(out, x[0], f)
		}}, nil
	}
	sc := d.Scaler
	return &kernel{kernels: []string{"scale_f32"}, run: func(dev *cuda.Device, out *cuda.Tensor, x []*cuda.Tensor) error {
		return dev.Scale(out, x[0], sc.Scale())
	}}, nil
}
