package ddp_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"

	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mlp is a plain gorgonia two-layer perceptron, written without package nn.
type mlp struct {
	g      *G.ExprGraph
	x, y   *G.Node
	w1, w2 *G.Node
	cost   *G.Node
	grads  G.Nodes
	vm     G.VM
	raw    *ddp.Raw
}

func newMLP(seed int64, batch int) *mlp {
	rng := rand.New(rand.NewSource(seed))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 0.5
		}
		return v
	}
	m := &mlp{g: G.NewGraph()}
	m.x = G.NewMatrix(m.g, tensor.Float32, G.WithShape(batch, 4), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(batch, 4), tensor.WithBacking(make([]float32, batch*4)))))
	m.y = G.NewMatrix(m.g, tensor.Float32, G.WithShape(batch, 1), G.WithName("y"), G.WithValue(tensor.New(tensor.WithShape(batch, 1), tensor.WithBacking(make([]float32, batch)))))
	m.w1 = G.NewMatrix(m.g, tensor.Float32, G.WithShape(4, 16), G.WithName("w1"), G.WithValue(tensor.New(tensor.WithShape(4, 16), tensor.WithBacking(randn(64)))))
	m.w2 = G.NewMatrix(m.g, tensor.Float32, G.WithShape(16, 1), G.WithName("w2"), G.WithValue(tensor.New(tensor.WithShape(16, 1), tensor.WithBacking(randn(16)))))
	return m
}

// build builds the forward (through taps when taps is set), the gradients and the machine.
func (m *mlp) build(taps bool) error {
	w1, w2 := m.w1, m.w2
	if taps {
		var err error
		if w1, err = m.raw.Tap(m.w1); err != nil {
			return err
		}
		if w2, err = m.raw.Tap(m.w2); err != nil {
			return err
		}
	}
	h := G.Must(G.Rectify(G.Must(G.Mul(m.x, w1))))
	d := G.Must(G.Sub(G.Must(G.Mul(h, w2)), m.y))
	m.cost = G.Must(G.Mean(G.Must(G.Square(d))))
	var err error
	if m.grads, err = G.Grad(m.cost, m.w1, m.w2); err != nil {
		return err
	}
	m.vm = G.NewTapeMachine(m.g)
	return nil
}

// data fills this rank's slice of the global batch of step: y = sum of x.
func (m *mlp) data(step, rank, batch int) {
	x := m.x.Value().Data().([]float32)
	y := m.y.Value().Data().([]float32)
	rng := rand.New(rand.NewSource(int64(step*100 + rank)))
	for i := range batch {
		var s float32
		for j := range 4 {
			x[4*i+j] = float32(rng.NormFloat64())
			s += x[4*i+j]
		}
		y[i] = s
	}
}

func onEveryRank(n int, fn func(r int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = fn(r) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// A plain gorgonia MLP (own learnable nodes, G.Grad, a TapeMachine) trained data-parallel
// on two in-process ranks: with taps (gradients reduced in buckets during backward) and
// without (one reduction after the tape). Graphs are built one at a time (gorgonia's graph
// construction is not thread-safe); the ranks then run concurrently.
func Example_rawGorgonia() {
	const world, batch = 2, 16
	ctx := context.Background()
	for _, taps := range []bool{true, false} {
		groups := comm.NewLocalGroups(world)
		ranks := make([]*mlp, world)
		for r := range ranks {
			ranks[r] = newMLP(int64(r), batch)
		}
		err := onEveryRank(world, func(r int) error { // New communicates: all ranks at once
			var err error
			ranks[r].raw, err = ddp.NewRaw(ctx, groups[r], []*G.Node{ranks[r].w1, ranks[r].w2}, ddp.FirstBucketBytes(64))
			return err
		})
		for r := range ranks {
			if err == nil {
				err = ranks[r].build(taps)
			}
		}
		losses := make([][]float32, world)
		if err == nil {
			err = onEveryRank(world, func(r int) error {
				m := ranks[r]
				for step := range 60 {
					m.data(step, r, batch)
					m.raw.ZeroGrad()
					m.vm.Reset()
					grads := m.grads
					if taps {
						grads = nil
					}
					if err := m.raw.Run(ctx, m.vm.RunAll, grads); err != nil {
						return err
					}
					losses[r] = append(losses[r], m.cost.Value().Data().(float32))
					ps := m.raw.Params()
					for i, g := range ps.Grad {
						ps.Data[i] -= 0.05 * g
					}
				}
				return groups[r].Close(ctx)
			})
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		same := true
		for i, v := range ranks[0].raw.Params().Data {
			same = same && v == ranks[1].raw.Params().Data[i]
		}
		l := losses[0]
		fmt.Printf("taps=%v: replicas equal: %v, loss went down: %v, buckets: %d\n",
			taps, same, l[len(l)-1] < l[0]/4, len(ranks[0].raw.Buckets()))
	}
	// Output:
	// taps=true: replicas equal: true, loss went down: true, buckets: 2
	// taps=false: replicas equal: true, loss went down: true, buckets: 2
}
