package tape

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/driver"
	"github.com/gorgonia-parallel/gp/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Program is a model compiled for a device: train.Program's verbs with nn.Program's inputs
// and loss. Run, Step and ZeroGrad must not be called concurrently.
type Program struct {
	cpu   *nn.Program
	dev   *cuda.Device
	steps []step
	vals  []*cuda.Tensor // by slot, during a Run
	ins   []leafIn       // leaves copied in at every Run
	fixed []*cuda.Tensor // folded constants, by slot (nil elsewhere), for the program's life
	loss  int            // slot of the loss, -1 without
	lossV float32
	outs  map[string]*output
	ran   bool

	nodeOf   map[G.Op]*G.Node // the node of each lowered op (a backward's forward)
	inputsOf map[*G.Node][]*G.Node
	saved    map[G.Op]*saved // what forward ops leave their backward ops, per Run
	runOwned []*cuda.Tensor  // allocated during a Run for its remainder
	own      []*cuda.Tensor  // the program's own device memory (indices)
	bn       runningStats    // BatchNorm's running statistics (bnstats.go)
	runCtx   context.Context // the current Run's, for SyncBatchNorm's host waits (syncbn.go)
	stage    staging         // pinned buffers of the copies in and out (staging.go)
	pending  bool            // a Run returned before its synchronisation: copies may use the pinned buffers

	st      *State        // the device state the program was compiled from (State.Compile), nil for tape.Compile
	pleaves []paramLeaf   // under st: parameter leaves, viewing the state's device buffer
	uleaves [][]paramLeaf // under a unit state, by unit: its parameter leaves (bound at Need)
	uviews  [][]int       // under a unit state, by unit: alias steps viewing its parameters

	profileEnv bool           // compiled under GP_TAPE_PROFILE=1: the first Run starts the device's profile
	events     []driver.Event // timing events of profiled Runs, two per step (profile.go)
}

// paramLeaf is a parameter's leaf under a State: its slot holds a view of the device buffer.
type paramLeaf struct {
	slot  int
	node  *G.Node
	param *nn.Param
}

// output is a named output, copied to the host at the end of every Run.
type output struct {
	slot int
	host []float32
}

// step computes one node: slot out from slots in. Exactly one of run, alias, hook is set.
type step struct {
	node  *G.Node
	out   int
	in    []int
	shape []int
	run   func(d *cuda.Device, out *cuda.Tensor, in []*cuda.Tensor) error
	alias bool
	hook  *hostHook
	free  []int // slots whose memory is returned to the device's cache after this step

	unitsBefore, unitsAfter []unitCall // under a unit state: Need before, Done after (units.go)
}

// hostHook is a GradHook: the gradient is copied into host and handed to the hook's Do.
type hostHook struct {
	op  G.Op
	buf *tensor.Dense
}

type leafIn struct {
	slot int
	node *G.Node
}

// Compile builds m with build and the options, exactly as nn.Compile (same graph, same
// gradients, optimizer or solver), and lowers it to dev. An op that has no device kernel,
// or whose kernel dev has not loaded, is an error naming the op and its node.
func Compile(dev *cuda.Device, m *nn.Model, build nn.BuildFunc, opts ...nn.BuildOption) (*Program, error) {
	return compile(dev, m, build, nil, opts)
}

// compile is Compile, and under st (non-nil) State.Compile.
func compile(dev *cuda.Device, m *nn.Model, build nn.BuildFunc, st *State, opts []nn.BuildOption) (*Program, error) {
	if dev == nil {
		return nil, fmt.Errorf("cuda/tape: no device (open one with cuda.Open)")
	}
	profile, err := profileEnv()
	if err != nil {
		return nil, err
	}
	cpu, err := nn.Compile(m, build, opts...)
	if err != nil {
		return nil, err
	}
	p := &Program{cpu: cpu, dev: dev, loss: -1, nodeOf: map[G.Op]*G.Node{}, inputsOf: map[*G.Node][]*G.Node{}, saved: map[G.Op]*saved{}, st: st, profileEnv: profile}
	if err := p.lower(); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// lower orders the graph as the TapeMachine does (G.Sort reversed) and lowers every node.
func (p *Program) lower() error {
	g := p.cpu.Graph()
	sorted, err := G.Sort(g)
	if err != nil {
		return fmt.Errorf("cuda/tape: sorting the graph: %w", err)
	}
	slot := map[*G.Node]int{}
	folded := map[*G.Node]G.Value{}
	lastUse := map[int]int{} // storage slot -> index of the last step that reads it
	root := map[int]int{}    // slot -> the slot whose memory it views
	persistent := map[int]bool{}
	paramOf := map[*G.Node]*nn.Param{}
	var scratch []float32 // under a State: the placeholder every GradHook hands nn (never read)
	if p.st != nil {
		for _, prm := range p.cpu.Builder.UsedParams() {
			paramOf[p.cpu.Builder.Leaf(prm)] = prm
			scratch = make([]float32, max(len(scratch), prm.Numel()))
		}
	}
	for i := len(sorted) - 1; i >= 0; i-- {
		n := sorted[i]
		s := len(slot)
		slot[n] = s
		root[s] = s
		if n.Dtype() != tensor.Float32 {
			return fmt.Errorf("cuda/tape: node %s is %v: the device executor runs float32 graphs", n.Name(), n.Dtype())
		}
		var in []*G.Node
		for it := g.From(n.ID()); it.Next(); {
			in = append(in, it.Node().(*G.Node))
		}
		if n.Op() == nil {
			if n.Value() == nil {
				return fmt.Errorf("cuda/tape: leaf %s has no value", n.Name())
			}
			persistent[s] = true
			if prm, ok := paramOf[n]; ok {
				p.pleaves = append(p.pleaves, paramLeaf{s, n, prm})
				continue
			}
			p.ins = append(p.ins, leafIn{s, n})
			continue
		}
		if foldable(n, in, folded) {
			v, err := fold(n, in, folded)
			if err != nil {
				return fmt.Errorf("cuda/tape: node %s (%v): folding on the host: %w", n.Name(), n.Op(), err)
			}
			folded[n] = v
			persistent[s] = true
			continue
		}
		if reflect.TypeOf(n.Op()).Comparable() { // the project's ops are pointers; some of gorgonia's hold slices
			p.nodeOf[n.Op()] = n
		}
		p.inputsOf[n] = in
		k, err := p.lowerNode(n, in)
		if errors.Is(err, errNoKernel) {
			return fmt.Errorf("cuda/tape: op %v (%s) of node %s has no device kernel", n.Op(), opType(n.Op()), n.Name())
		}
		if err != nil {
			return fmt.Errorf("cuda/tape: op %v of node %s: %w", n.Op(), n.Name(), err)
		}
		for _, kn := range k.kernels {
			if err := p.dev.Kernel(kn); err != nil {
				return fmt.Errorf("cuda/tape: op %v of node %s: %w", n.Op(), n.Name(), err)
			}
		}
		st := step{node: n, out: s, shape: dims(n), run: k.run, alias: k.alias}
		if k.hook {
			backing := make([]float32, n.Shape().TotalSize())
			if p.st != nil {
				backing = scratch[:len(backing)]
			}
			st.hook = &hostHook{op: n.Op(), buf: tensor.New(tensor.WithShape(n.Shape().Clone()...), tensor.WithBacking(backing))}
		}
		for _, x := range append(append([]*G.Node(nil), in...), k.extra...) {
			s, ok := slot[x]
			if !ok {
				return fmt.Errorf("cuda/tape: op %v of node %s reads %s, which is not in the graph", n.Op(), n.Name(), x.Name())
			}
			st.in = append(st.in, s)
		}
		idx := len(p.steps)
		for _, x := range st.in {
			lastUse[root[x]] = idx
		}
		if st.alias || st.hook != nil {
			root[s] = root[st.in[0]]
		}
		lastUse[root[s]] = max(lastUse[root[s]], idx)
		p.steps = append(p.steps, st)
	}
	if p.cpu.Loss != nil {
		s, ok := slot[p.cpu.Loss]
		if !ok {
			return fmt.Errorf("cuda/tape: the loss %s is not in the graph", p.cpu.Loss.Name())
		}
		p.loss = s
		persistent[root[s]] = true
	}
	p.outs = map[string]*output{}
	for _, name := range p.cpu.OutputNames() {
		n := p.cpu.OutputNode(name)
		s, ok := slot[n]
		if !ok {
			return fmt.Errorf("cuda/tape: output %s (node %s) is not in the graph", name, n.Name())
		}
		if n.Dtype() != tensor.Float32 {
			return fmt.Errorf("cuda/tape: output %s is %v, want float32", name, n.Dtype())
		}
		p.outs[name] = &output{slot: s, host: make([]float32, n.Shape().TotalSize())}
		persistent[root[s]] = true
	}
	p.vals = make([]*cuda.Tensor, len(slot))
	p.fixed = make([]*cuda.Tensor, len(slot))
	for n, v := range folded {
		data, err := hostF32(v)
		if err != nil {
			return fmt.Errorf("cuda/tape: node %s: %w", n.Name(), err)
		}
		if p.fixed[slot[n]], err = p.dev.FromHost(data, dims(n)...); err != nil {
			return fmt.Errorf("cuda/tape: node %s: %w", n.Name(), err)
		}
	}
	for _, in := range p.ins {
		t, err := p.dev.Alloc(cuda.Float32, dims(in.node)...)
		if err != nil {
			return fmt.Errorf("cuda/tape: leaf %s: %w", in.node.Name(), err)
		}
		p.fixed[in.slot] = t
	}
	if p.st != nil && p.st.hooks != nil {
		if err := p.scheduleUnits(root); err != nil {
			return err
		}
	}
	for _, pl := range p.pleaves {
		if p.st.hooks != nil {
			break // bound at each Run by the unit hooks
		}
		v, err := p.st.paramView(pl.param).View(0, dims(pl.node)...)
		if err != nil {
			return fmt.Errorf("cuda/tape: parameter %s: %w", pl.param.Name, err)
		}
		p.fixed[pl.slot] = v
	}
	if err := p.bn.alloc(p.dev); err != nil {
		return err
	}
	if err := p.allocStaging(); err != nil {
		return err
	}
	for r, idx := range lastUse {
		if !persistent[r] {
			p.steps[idx].free = append(p.steps[idx].free, r)
		}
	}
	return nil
}

// Run copies the inputs and parameters in, runs forward and backward on the device, and
// hands every gradient to its hook (added into the gradient buffer, as nn.Program.Run).
func (p *Program) Run(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer p.release()
	p.runCtx = ctx
	if p.pending { // Note [One synchronisation per Run] (staging.go)
		if err := p.dev.Synchronize(ctx); err != nil {
			return fmt.Errorf("cuda/tape: the last run's copies: %w", err)
		}
		p.pending = false
	}
	p.pending = true
	if err := p.bn.begin(); err != nil {
		return err
	}
	copy(p.vals, p.fixed)
	if err := p.copyIn(); err != nil {
		return err
	}
	var prof *runProfile
	if pr := p.profile(); pr != nil {
		var err error
		if prof, err = p.startProfile(pr); err != nil {
			return err
		}
	}
	for i := range p.steps {
		st := &p.steps[i]
		for _, c := range st.unitsBefore {
			if err := p.bindUnit(c, i); err != nil {
				return fmt.Errorf("cuda/tape: before node %s: %w", st.node.Name(), err)
			}
		}
		if err := prof.before(i, st); err != nil {
			return fmt.Errorf("cuda/tape: profile: before node %s: %w", st.node.Name(), err)
		}
		if err := p.exec(ctx, st, prof, i); err != nil {
			return fmt.Errorf("cuda/tape: node %s (%v): %w", st.node.Name(), st.node.Op(), err)
		}
		if err := prof.after(i); err != nil {
			return fmt.Errorf("cuda/tape: profile: after node %s: %w", st.node.Name(), err)
		}
		for _, c := range st.unitsAfter {
			if err := p.unbindUnit(c); err != nil {
				return fmt.Errorf("cuda/tape: after node %s: %w", st.node.Name(), err)
			}
		}
	}
	copied, err := p.bn.enqueueOut()
	if err != nil {
		return err
	}
	if err := p.copyOut(ctx); err != nil {
		return err
	}
	p.pending = false
	p.bn.finish(copied)
	if prof != nil {
		if err := p.finishProfile(ctx, prof); err != nil {
			return err
		}
	}
	p.ran = true
	return nil
}

// exec runs step i; prof, when not nil, samples the memory in use after its op.
func (p *Program) exec(ctx context.Context, st *step, prof *runProfile, i int) error {
	in := make([]*cuda.Tensor, len(st.in))
	for i, s := range st.in {
		if in[i] = p.vals[s]; in[i] == nil {
			return fmt.Errorf("input %d has no value", i)
		}
	}
	switch {
	case st.alias:
		v, err := in[0].View(0, st.shape...)
		if err != nil {
			return err
		}
		p.vals[st.out] = v
	case st.hook != nil && p.st != nil:
		if err := p.st.runHook(st.hook.op, in[0], st.hook.buf); err != nil {
			return err
		}
		p.vals[st.out] = in[0]
	case st.hook != nil:
		if err := in[0].CopyTo(ctx, st.hook.buf.Data().([]float32)); err != nil {
			return err
		}
		if _, err := st.hook.op.Do(st.hook.buf); err != nil {
			return err
		}
		p.vals[st.out] = in[0]
	default:
		out, err := p.dev.Alloc(cuda.Float32, st.shape...)
		if err != nil {
			return err
		}
		p.vals[st.out] = out
		if err := st.run(p.dev, out, in); err != nil {
			return err
		}
	}
	prof.sample(i, p.dev)
	for _, s := range st.free {
		p.vals[s].Free()
		p.vals[s] = nil
	}
	return nil
}

// release returns every value of the run to the device's cache (views and fixed tensors
// excepted: their Free does nothing or they are kept).
func (p *Program) release() {
	for s, v := range p.vals {
		if v != nil && v != p.fixed[s] {
			v.Free()
		}
		p.vals[s] = nil
	}
	for _, t := range p.runOwned {
		t.Free()
	}
	p.runOwned = p.runOwned[:0]
	for _, s := range p.saved {
		*s = saved{}
	}
}

// Step applies the optimizer or solver given at Compile to the gradients on the host, then
// zeroes them (nn.Program.Step); the next Run copies the updated parameters in. A program
// of a State steps with the state's device optimizer and zeroes the device gradients
// (State.Step).
func (p *Program) Step(ctx context.Context) error {
	if p.st != nil {
		return p.st.Step(ctx)
	}
	return p.cpu.Step(ctx)
}

// ZeroGrad zeroes the gradient buffer (the device's, for a program of a State).
func (p *Program) ZeroGrad() error {
	if p.st != nil {
		return p.st.ZeroGrad()
	}
	return p.cpu.ZeroGrad()
}

// State is the device state the program was compiled from (State.Compile), or nil.
func (p *Program) State() *State { return p.st }

// SetInput copies data into the named input's host memory; Run copies it to the device.
func (p *Program) SetInput(name string, data []float32) error { return p.cpu.SetInput(name, data) }

// Input returns the host memory of the named input (see nn.Program.Input).
func (p *Program) Input(name string) ([]float32, error) { return p.cpu.Input(name) }

// LossValue returns the loss of the last Run.
func (p *Program) LossValue() (float32, error) {
	if p.loss < 0 {
		return 0, fmt.Errorf("cuda/tape: program has no loss")
	}
	if !p.ran {
		return 0, fmt.Errorf("cuda/tape: no loss before the first Run")
	}
	return p.lossV, nil
}

// Output returns the named output of the last Run, in host memory valid until the next Run.
func (p *Program) Output(name string) ([]float32, error) {
	o, ok := p.outs[name]
	if !ok {
		return nil, fmt.Errorf("cuda/tape: no output named %q", name)
	}
	if !p.ran {
		return nil, fmt.Errorf("cuda/tape: no output %s before the first Run", name)
	}
	return o.host, nil
}

// CPU returns the nn.Program the device program was compiled from: its Builder, Learnables
// and optimizer. Running it runs the graph on the CPU.
func (p *Program) CPU() *nn.Program { return p.cpu }

// Close frees the program's device memory and the CPU program.
func (p *Program) Close() error {
	p.release()
	for s, t := range p.fixed {
		t.Free()
		p.fixed[s] = nil
	}
	for _, t := range p.own {
		t.Free()
	}
	p.own = nil
	p.bn.free()
	p.freeStaging()
	var err error
	for _, e := range p.events {
		if e2 := p.dev.Context().EventDestroy(e); e2 != nil && err == nil {
			err = fmt.Errorf("cuda/tape: destroying a profile event: %w", e2)
		}
	}
	p.events = nil
	cerr := p.cpu.Close()
	if err == nil {
		return cerr
	}
	return errors.Join(err, cerr)
}
