package gpucheck

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
)

// need skips the test when err says there is no GPU, unless REQUIRE_GPU=1.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("REQUIRE_GPU") == "1" {
		t.Fatalf("REQUIRE_GPU=1 but %s: %v", what, err)
	}
	t.Skipf("no GPU (%s): %v", what, err)
}

var shared *cuda.Device

// device opens device 0 once for the whole binary.
func device(t *testing.T) *cuda.Device {
	t.Helper()
	if shared == nil {
		d, err := cuda.Open(0)
		need(t, "opening device 0", err)
		shared = d
		impl, why := d.ConvImplInUse()
		t.Logf("device 0: %s; convolution: %v (%v)", d.Name(), impl, why)
	}
	return shared
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * scale)
	}
	return out
}

// relErr is max|got-want| / max|want|: the error relative to the result's scale, the measure
// every tolerance here is stated in (elementwise relative error is meaningless near zero).
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	if den == 0 {
		return num
	}
	return num / den
}

func upload(t *testing.T, d *cuda.Device, data []float32, shape ...int) *cuda.Tensor {
	t.Helper()
	x, err := d.FromHost(data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Free)
	return x
}

func alloc(t *testing.T, d *cuda.Device, dt cuda.DType, shape ...int) *cuda.Tensor {
	t.Helper()
	x, err := d.Alloc(dt, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Free)
	return x
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// randLabels draws n class labels below classes.
func randLabels(r *rand.Rand, n, classes int) []int32 {
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(r.IntN(classes))
	}
	return labels
}

// floatLabels converts class labels to the float class indices models.Run takes.
func floatLabels(labels []int32) []float32 {
	lf := make([]float32, len(labels))
	for i, l := range labels {
		lf[i] = float32(l)
	}
	return lf
}

// checkLogitsLoss checks a device step's logits and loss against the CPU's (models.Run), to
// 5e-4 of their scale.
func checkLogitsLoss(t *testing.T, logits []float32, loss float32, cpu *models.Outputs) {
	t.Helper()
	if e := relErr(logits, f64(cpu.Logits)); !(e <= 5e-4) {
		t.Errorf("logits: relative error %.3g > 5e-4", e)
	} else {
		t.Logf("logits rel err %.2g; loss GPU %.6f CPU %.6f", e, loss, cpu.Loss)
	}
	if !(math.Abs(float64(loss-cpu.Loss)) <= 5e-4*math.Max(1, math.Abs(float64(cpu.Loss)))) {
		t.Errorf("loss GPU %v, CPU %v", loss, cpu.Loss)
	}
}

// errRow is one tensor's relative error against the CPU.
type errRow struct {
	name string
	err  float64
}

// gradErrs is the relative error of each parameter gradient in grad (laid out as
// m.Params.Grad) against the CPU's, named "grad NAME".
func gradErrs(m *nn.Model, grad []float32, cpu *models.Outputs) []errRow {
	var rows []errRow
	for _, e := range cpu.Grads {
		p := m.Params.Param(e.Name)
		rows = append(rows, errRow{"grad " + e.Name, relErr(grad[p.Offset:p.Offset+len(e.F32)], f64(e.F32))})
	}
	return rows
}

// checkErrs fails the rows whose error is above 5e-3 and logs the worst few that pass.
func checkErrs(t *testing.T, rows []errRow, worst int) {
	t.Helper()
	sort.Slice(rows, func(i, j int) bool { return rows[i].err > rows[j].err })
	for i, rw := range rows {
		if !(rw.err <= 5e-3) {
			t.Errorf("%s: relative error %.3g > 5e-3", rw.name, rw.err)
		} else if i < worst {
			t.Logf("worst: %s rel err %.2g", rw.name, rw.err)
		}
	}
}

// trainThroughput runs warmup+steps training steps of batch images (step, then sgd with lr
// 0.01 and momentum 0.9, then a synchronize) and returns the images/s of the last steps;
// what names the run in failures.
func trainThroughput(t *testing.T, d *cuda.Device, what string, batch, warmup, steps int, step func() (loss float32, err error), sgd func(lr, momentum float32) error) float64 {
	t.Helper()
	ctx := context.Background()
	var el time.Duration
	for i := range warmup + steps {
		start := time.Now()
		loss, err := step()
		if err == nil {
			err = sgd(0.01, 0.9)
		}
		if err == nil {
			err = d.Synchronize(ctx)
		}
		if err != nil {
			t.Fatalf("%s step %d: %v", what, i, err)
		}
		if math.IsNaN(float64(loss)) {
			t.Errorf("%s step %d: loss is NaN", what, i)
		}
		if i >= warmup {
			el += time.Since(start)
		}
	}
	return float64(batch*steps) / el.Seconds()
}

// benchInputs builds the model of root and draws a batch of 224x224 images and labels of
// 1000 classes from the PCG seeded (seed1, seed2), for a throughput test.
func benchInputs(t *testing.T, root nn.Module, batch int, seed1, seed2 uint64) (m *nn.Model, x []float32, shape []int, labels []int32) {
	t.Helper()
	m, err := nn.NewModel(root)
	if err != nil {
		t.Fatal(err)
	}
	shape = []int{batch, 3, 224, 224}
	r := rand.New(rand.NewPCG(seed1, seed2))
	x = randn(r, batch*3*224*224, 1)
	return m, x, shape, randLabels(r, batch, 1000)
}
