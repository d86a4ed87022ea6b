// Package tape runs the graphs package nn compiles on a cuda.Device: the device's
// TapeMachine, for modules and plain gorgonia programs alike, with the user's graph code
// unchanged (docs/DESIGN.md §9, "Graph executor").
//
//	dev, err := cuda.Open(0) // an error at once on a machine without a GPU
//	...
//	p, err := tape.Compile(dev, m, build, nn.WithSolver(G.NewAdamSolver(G.WithLearnRate(0.01))))
//	...
//	for step := range steps {
//		p.SetInput("x", x) // host memory, copied in by Run
//		if err := train.RunStep(ctx, p); err != nil { ... }
//	}
//
// Compile builds the graph with nn.Compile (forward, G.Grad's backward, the taps, the
// options' hooks) and lowers every node of nn.Program.Graph, in the TapeMachine's order, to
// a device kernel by its op: gorgonia's ops are recognised by their type and String() (the
// table in ops.go), which gorgonia keeps stable because its hashing and printing use it; the
// project's own ops by their descriptions (ops_nn.go, ops_norm.go, ops_window.go, ops_amp.go):
// ops.Describe describes nn/ops's ops and those of any package whose op types implement
// ops.Describer (models/swin's attention, row gathers and permutes), and amp.DescribeOp
// amp's. ResNet and the Swin Transformer train on the device as the graphs they are, and
// the executor imports no model: a package that defines ops gives them to the device by
// describing them in nn/ops's vocabulary, which needs no import of the device packages.
// An op without a device kernel, or one whose kernel the device has not loaded, is an error
// of Compile naming the op and the node, never a silent host fallback: a fallback would copy
// the value to the host and back at every run, which is exactly the cost a user moves to the
// GPU to avoid, and would hide it.
//
// Values stay on the device from one op to the next. Scalar subgraphs of constants and
// static sizes (SizeOf, the counts of gorgonia's Mean) are folded on the host at Compile.
// Each intermediate value is returned to the device's caching allocator right after its
// last reader, so the next op reuses its memory. Leaves (inputs, parameters) are copied in
// at each Run from the host memory nn binds them to, through pinned memory without a wait;
// a Run waits for the device once, at its end, for the loss, the outputs and BatchNorm's
// running statistics together (Note [One synchronisation per Run], staging.go; the host
// buffers are current after every Run). Each gradient leaves the device at its
// GradHook, the Tap's backward: it is copied into host memory and handed to the hook, which
// adds it into the gradient buffer in nn.ParamSet.Grad's layout (or gives it to the sink)
// and runs the gradient hooks, in backward order, as on the CPU. Step is nn's: the
// optimizer or solver steps the host parameters, which the next Run copies in.
//
// A State (NewState) keeps the parameters, the gradient buffer and a device copy of an
// optim optimizer (SGD, Adam, AdamW) on the device instead: programs compiled from it
// (State.Compile) read the parameters in place, add each gradient into the device buffer at
// its GradHook with no host copy before nn's gradient hooks run (cuda/devddp's buckets start
// there), and step on the device, whole or by ranges (a DDP bucket). ToHost and FromHost
// move the parameters and the optimizer's state to and from the host for checkpoints.
//
// A unit state (NewUnitState) holds no parameters: they are cut into units (flat ranges),
// and at Compile the program finds each unit's first and last reader in forward and in
// backward; every Run calls the UnitHooks' Need right before the first (the unit's
// parameter leaves are bound to the block it returns) and Done right after the last, and
// adds gradients into the block Grad returns. cuda/devzero gathers ZeRO-3's units there,
// ahead of use, and frees them after (Program.UnitSchedule is the order of the calls).
//
// A per-op device profile is off by default. StartProfile(dev), or GP_TAPE_PROFILE=1 when a
// program is compiled, times every op of every Run on the device with CUDA events and
// notes the memory in use after each; WriteProfile(w, dev, top) prints the top kinds of op
// by device time, the memory peak and the allocator's statistics (Note [Per-op device
// profile] in profile.go).
package tape
