package tape_test

import (
	"context"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cublas"
	"github.com/gorgonia-parallel/gp/cuda/cudnn"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tolerances of the tiny models trained under autocast against the CPU's emulation. The
// device's 16-bit GEMMs and convolutions compute the same products as the CPU (a product of
// two bf16 or fp16 values is exact in float32) and differ only in the order of the float32
// sums, ~1e-7 relative per op as in float32 (modelTol). But each op's output and each
// gradient is then rounded to 16 bits, and where a sum lies within that difference of a
// rounding boundary the two sides round it to neighbouring values, one 16-bit ulp apart
// (2^-8 relative for bf16, 2^-11 for fp16). Such a flip is rare, but in these tiny models
// (32 pooled features feed the classifier) one flip moves the loss by ~1e-4 and the steps
// after amplify it: the fp16 ResNet has one at its first forward (loss 1.4e-4 off, 8.2e-4
// after 3 steps, parameters 1.4e-2 of the update); the other cases stay below 1e-6. So:
//   - losses within ampLossTol, relative;
//   - parameters within ampParamTol: |device − CPU| over |CPU − initial| (L2 over the flat
//     buffer), the error relative to what the steps changed;
//   - and both less than half of how far the CPU's float32 run lies from its autocast run,
//     so that the test tells 16-bit numerics from float32 ones.
const (
	ampLossTol  = 2e-3
	ampParamTol = 3e-2
)

// gemmCounts reads the process's GEMM and convolution counters by input type.
type gemmCounts struct{ sgemm, f32Ex, ex16, dnn32, dnn16 int64 }

func readCounts() gemmCounts {
	var c gemmCounts
	c.sgemm = cublas.Calls("cublasSgemm", cublas.R32F)
	c.f32Ex = cublas.Calls("cublasGemmEx", cublas.R32F) + cublas.Calls("cublasGemmStridedBatchedEx", cublas.R32F)
	for _, t := range []cublas.DataType{cublas.R16F, cublas.R16BF} {
		c.ex16 += cublas.Calls("cublasGemmEx", t) + cublas.Calls("cublasGemmStridedBatchedEx", t)
	}
	for _, f := range []string{"cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter"} {
		c.dnn32 += cudnn.Calls(f, cudnn.Float)
		c.dnn16 += cudnn.Calls(f, cudnn.Half) + cudnn.Calls(f, cudnn.BFloat16)
	}
	return c
}

func (c gemmCounts) minus(o gemmCounts) gemmCounts {
	return gemmCounts{c.sgemm - o.sgemm, c.f32Ex - o.f32Ex, c.ex16 - o.ex16, c.dnn32 - o.dnn32, c.dnn16 - o.dnn16}
}

func (c gemmCounts) plus(o gemmCounts) gemmCounts {
	return gemmCounts{c.sgemm + o.sgemm, c.f32Ex + o.f32Ex, c.ex16 + o.ex16, c.dnn32 + o.dnn32, c.dnn16 + o.dnn16}
}

// The tiny ResNet and Swin trained 3 steps under autocast (bf16 without a loss scale, fp16
// with a GradScaler) by tape.Compile equal the CPU's autocast emulation (nn.Compile) within
// ampTol: losses, the loss scale, parameters; and the device's lower-precision ops ran in
// 16 bits: no float32 GEMM or convolution in the ResNet (autocast covers all of them), none
// but the attention's batched matmuls in the Swin (the CPU computes attention in float32).
// The ResNet runs once with cuDNN (16-bit cuDNN passes where the result is rounded anyway)
// and once with im2col (16-bit im2col and GemmEx) when the device has cuDNN.
func TestAutocastModelsMatchCPU(t *testing.T) {
	d := device(t)
	impls := []cuda.ConvImpl{cuda.ConvIm2col}
	if impl, _ := d.ConvImplInUse(); impl == cuda.ConvCuDNN {
		impls = append(impls, cuda.ConvCuDNN)
	}
	defer func() { _ = d.SetConvImpl(cuda.ConvAuto) }()
	for _, c := range []struct {
		name   string
		new    func() (nn.Module, error)
		format amp.Format
		scaler bool
		impl   cuda.ConvImpl
	}{
		{"resnet/bf16/im2col", tinyResNet, amp.BF16, false, cuda.ConvIm2col},
		{"resnet/fp16+scaler/im2col", tinyResNet, amp.FP16, true, cuda.ConvIm2col},
		{"resnet/bf16/cudnn", tinyResNet, amp.BF16, false, cuda.ConvCuDNN},
		{"resnet/fp16+scaler/cudnn", tinyResNet, amp.FP16, true, cuda.ConvCuDNN},
		{"swin/bf16", tinySwin, amp.BF16, false, cuda.ConvAuto},
		{"swin/fp16+scaler", tinySwin, amp.FP16, true, cuda.ConvAuto},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.impl == cuda.ConvCuDNN && len(impls) < 2 {
				t.Skip("the device has no cuDNN")
			}
			if err := d.SetConvImpl(c.impl); err != nil {
				t.Fatal(err)
			}
			dv, n, f32 := ampRun(t, d, c.new, c.format, c.scaler)
			t.Logf("device vs CPU autocast: losses within %.1e, parameters within %.1e of the update; CPU float32 vs autocast: %.1e, %.1e",
				dv.lossRel, dv.paramRel, f32.lossRel, f32.paramRel)
			if dv.lossRel > ampLossTol || dv.paramRel > ampParamTol {
				t.Errorf("device differs from the CPU's autocast by %.1e (losses), %.1e (parameters); tolerances %.0e, %.0e",
					dv.lossRel, dv.paramRel, ampLossTol, ampParamTol)
			}
			if dv.lossRel > f32.lossRel/2 || dv.paramRel > f32.paramRel/2 {
				t.Errorf("device differs from the CPU's autocast by %.1e (losses), %.1e (parameters): not clearly less than float32 does (%.1e, %.1e)",
					dv.lossRel, dv.paramRel, f32.lossRel, f32.paramRel)
			}
			t.Logf("device GEMMs and convolutions over the steps: %d 16-bit GEMMs, %d 16-bit cuDNN passes; float32: %d Sgemm, %d GemmEx, %d cuDNN",
				n.ex16, n.dnn16, n.sgemm, n.f32Ex, n.dnn32)
			if n.ex16+n.dnn16 == 0 || n.sgemm != 0 || n.dnn32 != 0 {
				t.Errorf("the 16-bit path did not run as it should: %+v", n)
			}
			if c.impl == cuda.ConvCuDNN && n.dnn16 == 0 {
				t.Errorf("no 16-bit cuDNN convolution with cuDNN in use: %+v", n)
			}
			if isResNet := c.impl != cuda.ConvAuto; isResNet && n.f32Ex != 0 {
				t.Errorf("%d float32 GEMMs in the ResNet under autocast", n.f32Ex)
			}
		})
	}
}

// ampDiff is how far a run lies from the CPU's autocast run: the largest relative
// difference of the losses, and the parameters' (L2) relative to the CPU's update.
type ampDiff struct{ lossRel, paramRel float64 }

// ampRun trains three copies of a model 3 steps: on the CPU under autocast, on the device
// under autocast, on the CPU in float32; it returns the device's and float32's differences
// from the CPU autocast run and the device's GEMM counts.
func ampRun(t *testing.T, d *cuda.Device, newModel func() (nn.Module, error), f amp.Format, withScaler bool) (dev ampDiff, counts gemmCounts, f32 ampDiff) {
	t.Helper()
	ctx := context.Background()
	const batch, steps, hw = 4, 3, 16
	type side struct {
		m      *nn.Model
		run    func() error
		step   func() error
		zero   func() error
		loss   func() (float32, error)
		setIn  func(string, []float32) error
		scaler *amp.GradScaler
	}
	var sides [3]*side
	for i := range sides {
		root, err := newModel()
		if err != nil {
			t.Fatal(err)
		}
		m, err := nn.NewModel(root, nn.WithSeed(7))
		if err != nil {
			t.Fatal(err)
		}
		segs, err := optim.Segments(m.Params, 1e-4)
		if err != nil {
			t.Fatal(err)
		}
		sgd, err := optim.NewSGD(segs, 0.1, optim.WithMomentum(0.9))
		if err != nil {
			t.Fatal(err)
		}
		s := &side{m: m}
		opts := []nn.BuildOption{nn.WithOptimizer(sgd)}
		if i < 2 {
			opts = append(opts, nn.WithAutocast(amp.Autocast(f)))
		}
		build := nn.Classify(batch, []int{3, hw, hw}, 0.1)
		if withScaler {
			if s.scaler, err = amp.NewGradScaler(amp.WithInitScale(1024)); err != nil {
				t.Fatal(err)
			}
			classify, sc := build, s.scaler
			build = func(b *nn.Builder) (*G.Node, error) {
				loss, err := classify(b)
				if err != nil {
					return nil, err
				}
				return sc.ScaleLoss(b, loss)
			}
		}
		if i == 1 {
			p, err := tape.Compile(d, m, build, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			s.run, s.step, s.zero, s.loss, s.setIn = func() error { return p.Run(ctx) }, func() error { return p.Step(ctx) }, p.ZeroGrad, p.LossValue, p.SetInput
		} else {
			p, err := nn.Compile(m, build, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			s.run, s.step, s.zero, s.loss, s.setIn = func() error { return p.Run(ctx) }, func() error { return p.Step(ctx) }, p.ZeroGrad, p.LossValue, p.SetInput
		}
		sides[i] = s
	}
	init := slices.Clone(sides[0].m.Params.Data)
	rng := rand.New(rand.NewSource(3))
	x, y := make([]float32, batch*3*hw*hw), make([]float32, batch)
	var losses [3][]float32
	for st := range steps {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range y {
			y[i] = float32(rng.Intn(5))
		}
		for i, s := range sides {
			if err := s.setIn("images", x); err != nil {
				t.Fatal(err)
			}
			if err := s.setIn("labels", y); err != nil {
				t.Fatal(err)
			}
			before := readCounts()
			if err := s.run(); err != nil {
				t.Fatalf("side %d, step %d: %v", i, st, err)
			}
			if i == 1 {
				counts = counts.plus(readCounts().minus(before))
			}
			l, err := s.loss()
			if err != nil {
				t.Fatal(err)
			}
			if s.scaler != nil {
				l /= s.scaler.Scale()
				s.scaler.Unscale(s.m.Params.Grad)
				inf, err := s.scaler.FoundInf(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if inf {
					if err := s.zero(); err != nil {
						t.Fatal(err)
					}
				} else if err := s.step(); err != nil {
					t.Fatal(err)
				}
				if err := s.scaler.Update(); err != nil {
					t.Fatal(err)
				}
			} else if err := s.step(); err != nil {
				t.Fatal(err)
			}
			losses[i] = append(losses[i], l)
		}
		t.Logf("step %d: loss cpu %.7f device %.7f float32 %.7f", st, losses[0][st], losses[1][st], losses[2][st])
	}
	if withScaler && sides[0].scaler.Scale() != sides[1].scaler.Scale() {
		t.Errorf("loss scale after the steps: device %v, CPU %v", sides[1].scaler.Scale(), sides[0].scaler.Scale())
	}
	diff := func(o int) ampDiff {
		var r ampDiff
		r.lossRel = maxRel(losses[o], losses[0])
		var num, den float64
		for i, v := range sides[0].m.Params.Data {
			num += sq(float64(sides[o].m.Params.Data[i]) - float64(v))
			den += sq(float64(v) - float64(init[i]))
		}
		r.paramRel = math.Sqrt(num / den)
		return r
	}
	return diff(1), counts, diff(2)
}

func sq(v float64) float64 { return v * v }

// gorgonia's matmuls that a user autocasts by hand (amp.Round on the operands and the
// result) run as 16-bit GEMMs, forward and backward, and equal the CPU's emulation within
// opTol: their sums have 3 or 4 terms, few enough that both sides add them in one order
// (measured: equal to the bit), so no rounding flips, unlike the models above.
func TestAutocastMatMulsMatchCPU(t *testing.T) {
	d := device(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		x, w []int
		mul  func(x, w *G.Node) (*G.Node, error)
	}{
		{"matmul", []int{2, 3}, []int{3, 4}, G.Mul},
		{"matrix × vector", []int{2, 3}, []int{3}, G.Mul},
		{"batched matmul", []int{2, 2, 3}, []int{2, 3, 2}, func(x, w *G.Node) (*G.Node, error) { return G.BatchedMatMul(x, w) }},
	} {
		for _, f := range []amp.Format{amp.BF16, amp.FP16} {
			t.Run(c.name+"/"+f.String(), func(t *testing.T) {
				r := rand.New(rand.NewSource(int64(len(c.name))))
				draw := func(n int) []float32 {
					v := make([]float32, n)
					for j := range v {
						v[j] = float32(3*r.Float64() - 1.5)
					}
					return v
				}
				xv, wv := draw(prod(c.x)), draw(prod(c.w))
				build := func(b *nn.Builder) (*G.Node, error) {
					x, err := b.Input("x", c.x...)
					if err != nil {
						return nil, err
					}
					w := G.NewTensor(b.Graph, tensor.Float32, len(c.w), G.WithShape(c.w...), G.WithName("w"),
						G.WithValue(tensor.New(tensor.WithShape(c.w...), tensor.WithBacking(slices.Clone(wv)))))
					wu, err := b.Learnable(w)
					if err != nil {
						return nil, err
					}
					y, err := c.mul(must(amp.Round(x, f)), must(amp.Round(wu, f)))
					if err != nil {
						return nil, err
					}
					return G.Sum(must(G.Square(must(amp.Round(y, f)))))
				}
				var progs [2]interface {
					SetInput(string, []float32) error
					Run(context.Context) error
					LossValue() (float32, error)
				}
				var models [2]*nn.Model
				for i := range progs {
					m, err := nn.NewGraphModel(build)
					if err != nil {
						t.Fatal(err)
					}
					models[i] = m
					if i == 0 {
						p, err := nn.Compile(m, build)
						if err != nil {
							t.Fatal(err)
						}
						defer p.Close()
						progs[i] = p
					} else {
						p, err := tape.Compile(d, m, build)
						if err != nil {
							t.Fatal(err)
						}
						defer p.Close()
						progs[i] = p
					}
				}
				var n gemmCounts
				for i, p := range progs {
					if err := p.SetInput("x", xv); err != nil {
						t.Fatal(err)
					}
					before := readCounts()
					if err := p.Run(ctx); err != nil {
						t.Fatal(err)
					}
					if i == 1 {
						n = readCounts().minus(before)
					}
				}
				lc, _ := progs[0].LossValue()
				ld, _ := progs[1].LossValue()
				rl, rg := maxRel([]float32{ld}, []float32{lc}), maxRel(models[1].Params.Grad, models[0].Params.Grad)
				t.Logf("loss %.3g, gradient %.3g relative; device: %d 16-bit GEMMs, %d Sgemm, %d float32 GemmEx", rl, rg, n.ex16, n.sgemm, n.f32Ex)
				if rl > opTol || rg > opTol {
					t.Errorf("loss %v (cpu %v), gradient %v (cpu %v): differ by %.3g and %.3g (tolerance %g)", ld, lc, models[1].Params.Grad, models[0].Params.Grad, rl, rg, opTol)
				}
				if n.ex16 == 0 || n.sgemm+n.f32Ex != 0 {
					t.Errorf("GEMMs on the device: %+v, want all in 16 bits", n)
				}
			})
		}
	}
}
