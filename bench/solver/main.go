// Command solver measures what the five-line path costs: the step time of a plain gorgonia
// program wrapped with ddp.NewSolver (tape machine, then the gradients averaged in fused
// buckets, then gorgonia's solver) against the same model as a build function under ddp.New
// and Compile (gradients reduced bucket by bucket while backward runs, each bucket's range
// updated as its reduction lands), both at world 2 as two real processes over shared memory,
// one thread each, with gorgonia's Momentum solver. Models: a perceptron (784-1024-1024-10,
// 1.86M weights) and a gorgonia convnet (G.Conv2d 1→32→64 3x3, G.MaxPool2D, a dense layer;
// 28x28 inputs). It prints a table and writes bench/results/solver.json.
//
//	go run ./bench/solver -reps 3 -steps 30
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/parallel/sysmon"
	"github.com/gorgonia-parallel/gp/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// result is one rank's report (a JSON line on stdout).
type result struct {
	Rank    int     `json:"rank"`
	Seconds float64 `json:"seconds"`
	Steps   int     `json:"steps"`
}

// row is one model and path in the table.
type row struct {
	Model     string    `json:"model"`
	Path      string    `json:"path"`
	Weights   int       `json:"weights"`
	Batch     int       `json:"batch_per_rank"`
	StepMS    float64   `json:"step_ms"` // median over the repetitions of the slower rank's mean step
	RepsMS    []float64 `json:"step_ms_reps"`
	VsBuildFn float64   `json:"vs_build_function,omitempty"` // step time over the build function's
}

func main() {
	steps := flag.Int("steps", 30, "timed steps per run")
	warmup := flag.Int("warmup", 3, "untimed steps first")
	reps := flag.Int("reps", 3, "repetitions")
	out := flag.String("out", "bench/results/solver.json", "result file")
	flag.Parse()
	if role := os.Getenv("GP_BENCH_SOLVER_ROLE"); role != "" {
		model, path, _ := strings.Cut(role, "/")
		if err := child(model, path, *steps, *warmup); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := parent(*steps, *warmup, *reps, *out); err != nil {
		log.Fatal(err)
	}
}

func parent(steps, warmup, reps int, out string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	prov := benchutil.Start("solver", os.Args[1:])
	fmt.Printf("bench/solver: world 2, one thread per rank, %d timed steps after %d, %d repetitions\n%s\n", steps, warmup, reps, prov.Machine)
	args := []string{"-steps", strconv.Itoa(steps), "-warmup", strconv.Itoa(warmup)}
	env := []string{"OPENBLAS_NUM_THREADS=1", "GOMAXPROCS=1", "GP_RDZV_SECRET=bench-solver"}
	var rows []row
	for _, m := range models {
		times := map[string][]float64{}
		for range reps {
			// Both paths in each repetition, so a disturbance hits one repetition.
			for _, path := range []string{"build", "solver"} {
				rs, err := benchutil.Launch[result](2, func(int) []string { return []string{self} }, args,
					append(env, "GP_BENCH_SOLVER_ROLE="+m.name+"/"+path), 10*time.Minute)
				if err != nil {
					return fmt.Errorf("%s/%s: %w", m.name, path, err)
				}
				worst := 0.0
				for _, r := range rs {
					worst = math.Max(worst, 1e3*r.Seconds/float64(r.Steps))
				}
				times[path] = append(times[path], worst)
			}
		}
		for _, path := range []string{"build", "solver"} {
			rows = append(rows, row{Model: m.name, Path: path, Weights: m.weights(), Batch: m.batch,
				StepMS: benchutil.Median(times[path]), RepsMS: times[path]})
		}
		b, s := &rows[len(rows)-2], &rows[len(rows)-1]
		s.VsBuildFn = s.StepMS / b.StepMS
	}
	prov.End()
	fmt.Printf("\n| model | weights | batch/rank | build function (ddp.New, Compile) ms/step | wrapped solver (ddp.NewSolver) ms/step | solver / build |\n|---|---|---|---|---|---|\n")
	for i := 0; i < len(rows); i += 2 {
		b, s := rows[i], rows[i+1]
		fmt.Printf("| %s | %d | %d | %.1f | %.1f | %.2f |\n", b.Model, b.Weights, b.Batch, b.StepMS, s.StepMS, s.VsBuildFn)
	}
	fmt.Printf("load average after the run: %.2f\n", prov.LoadEnd)
	doc := map[string]any{
		"unit": "milliseconds per step, the slower rank's mean over the timed steps, median over repetitions",
		"rows": rows,
	}
	prov.Set(doc)
	return prov.Save(os.Stdout, out, doc)
}

// model is a plain gorgonia model: its weights and forward, shared by both paths.
type model struct {
	name   string
	batch  int
	input  []int // per sample
	shapes [][]int
	fwd    func(x, y *G.Node, ws []*G.Node) (*G.Node, error)
}

func (m model) weights() int {
	n := 0
	for _, s := range m.shapes {
		n += tensor.Shape(s).TotalSize()
	}
	return n
}

var models = []model{
	{name: "mlp", batch: 64, input: []int{784},
		shapes: [][]int{{784, 1024}, {1024, 1024}, {1024, 10}},
		fwd: func(x, y *G.Node, ws []*G.Node) (*G.Node, error) {
			h := x
			for i, w := range ws {
				var err error
				if h, err = G.Mul(h, w); err != nil {
					return nil, err
				}
				if i < len(ws)-1 {
					if h, err = G.Rectify(h); err != nil {
						return nil, err
					}
				}
			}
			return mse(h, y)
		}},
	{name: "convnet", batch: 32, input: []int{1, 28, 28},
		shapes: [][]int{{32, 1, 3, 3}, {64, 32, 3, 3}, {64 * 7 * 7, 10}},
		fwd: func(x, y *G.Node, ws []*G.Node) (*G.Node, error) {
			h := x
			for _, w := range ws[:2] {
				var err error
				if h, err = G.Conv2d(h, w, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}); err != nil {
					return nil, err
				}
				if h, err = G.Rectify(h); err != nil {
					return nil, err
				}
				if h, err = G.MaxPool2D(h, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}); err != nil {
					return nil, err
				}
			}
			b := h.Shape()[0]
			h, err := G.Reshape(h, tensor.Shape{b, 64 * 7 * 7})
			if err != nil {
				return nil, err
			}
			if h, err = G.Mul(h, ws[2]); err != nil {
				return nil, err
			}
			return mse(h, y)
		}},
}

func mse(out, y *G.Node) (*G.Node, error) {
	d, err := G.Sub(out, y)
	if err != nil {
		return nil, err
	}
	return G.Mean(G.Must(G.Square(d)))
}

// newWeights creates m's weights on g from fixed seeds.
func newWeights(g *G.ExprGraph, m model) []*G.Node {
	ws := make([]*G.Node, len(m.shapes))
	for i, s := range m.shapes {
		rng := rand.New(rand.NewPCG(uint64(i+1), 5))
		v := make([]float32, tensor.Shape(s).TotalSize())
		fanIn := s[0] // a [in,out] matrix
		if len(s) == 4 {
			fanIn = s[1] * s[2] * s[3] // a [out,in,kh,kw] filter
		}
		a := math.Sqrt(3 / float64(fanIn))
		for j := range v {
			v[j] = float32((2*rng.Float64() - 1) * a)
		}
		ws[i] = G.NewTensor(g, tensor.Float32, len(s), G.WithShape(s...), G.WithName("w"+strconv.Itoa(i)),
			G.WithValue(tensor.New(tensor.WithShape(s...), tensor.WithBacking(v))))
	}
	return ws
}

// fill writes deterministic inputs and targets.
func fill(x, y []float32, step int) {
	rng := rand.New(rand.NewPCG(uint64(step), 11))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.Float64())
	}
}

func newSolver() G.Solver { return G.NewMomentum(G.WithLearnRate(0.001), G.WithMomentum(0.9)) }

// child runs one rank of one path and prints its result.
func child(name, path string, steps, warmup int) error {
	var m model
	for _, c := range models {
		if c.name == name {
			m = c
		}
	}
	ctx := context.Background()
	xShape := append([]int{m.batch}, m.input...)
	x := make([]float32, tensor.Shape(xShape).TotalSize())
	y := make([]float32, m.batch*10)
	var step func() error
	var group comm.Group
	switch path {
	case "solver":
		g := G.NewGraph()
		xn := G.NewTensor(g, tensor.Float32, len(xShape), G.WithShape(xShape...), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(xShape...), tensor.WithBacking(x))))
		yn := G.NewMatrix(g, tensor.Float32, G.WithShape(m.batch, 10), G.WithName("y"), G.WithValue(tensor.New(tensor.WithShape(m.batch, 10), tensor.WithBacking(y))))
		ws := newWeights(g, m)
		loss, err := m.fwd(xn, yn, ws)
		if err != nil {
			return err
		}
		if _, err := G.Grad(loss, ws...); err != nil {
			return err
		}
		vm := G.NewTapeMachine(g, G.BindDualValues(ws...))
		defer vm.Close()
		s, err := ddp.NewSolver(ctx, newSolver(), g)
		if err != nil {
			return err
		}
		defer s.Close()
		group = s.Group()
		vgs := G.NodesToValueGrads(ws)
		step = func() error {
			vm.Reset()
			if err := vm.RunAll(); err != nil {
				return err
			}
			return s.Step(vgs)
		}
	case "build":
		// One rank of several on this host: the runtime's monitor thread yields the cores to the
		// compute (parallel/sysmon), as in every program the launcher starts.
		if _, err := sysmon.Lower(); err != nil {
			return err
		}
		grp, err := comm.InitFromEnv(ctx)
		if err != nil {
			return err
		}
		defer grp.Close(ctx)
		group = grp
		build := func(b *nn.Builder) (*G.Node, error) {
			xn, err := b.Input("x", xShape...)
			if err != nil {
				return nil, err
			}
			yn, err := b.Input("y", m.batch, 10)
			if err != nil {
				return nil, err
			}
			ws := newWeights(b.Graph, m)
			for i, w := range ws {
				if ws[i], err = b.Learnable(w); err != nil {
					return nil, err
				}
			}
			return m.fwd(xn, yn, ws)
		}
		mod, err := nn.NewGraphModel(build)
		if err != nil {
			return err
		}
		d, err := ddp.New(ctx, mod, grp)
		if err != nil {
			return err
		}
		p, err := d.Compile(build, nn.WithSolver(newSolver()))
		if err != nil {
			return err
		}
		defer p.Close()
		step = func() error {
			if err := p.SetInput("x", x); err != nil {
				return err
			}
			if err := p.SetInput("y", y); err != nil {
				return err
			}
			return train.RunStep(ctx, p)
		}
	default:
		return fmt.Errorf("unknown path %q", path)
	}
	var t0 time.Time
	for i := range warmup + steps {
		if i == warmup {
			t0 = time.Now()
		}
		fill(x, y, 2*i+group.Rank())
		if err := step(); err != nil {
			return fmt.Errorf("%s/%s step %d: %w", name, path, i, err)
		}
	}
	raw, _ := json.Marshal(result{Rank: group.Rank(), Seconds: time.Since(t0).Seconds(), Steps: steps})
	fmt.Println(string(raw))
	return nil
}
