package tape_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/cuda"
	"github.com/gorgonia-parallel/gp/cuda/cudatest"
	"github.com/gorgonia-parallel/gp/cuda/devddp"
	"github.com/gorgonia-parallel/gp/cuda/internal/dl"
	"github.com/gorgonia-parallel/gp/cuda/tape"
	"github.com/gorgonia-parallel/gp/models/resnet"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/comm/nccl"
	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	"github.com/gorgonia-parallel/gp/train"
)

// Note [Counting host synchronisations]: a training step on the device should enqueue its
// work and wait for the device once, to read the loss. TestStepSyncs measures that at the
// driver's boundary: its child process loads a counting libcuda (countingLib, built here)
// that forwards every driver call to the fake libcuda and counts the calls, and runs
// training steps (train.RunStep) of a device State's program (what the trainer runs at
// world size 1) and of device DDP. A host synchronisation is a call that returns only once
// the device has run work: cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, a
// synchronous copy, or a cuStreamQuery or cuEventQuery that found its work done (a polling
// wait ends with one: Device.Synchronize's, the NCCL worker's for each collective).
// Launches are cuLaunchKernel calls (the cuBLAS and cuDNN calls, which the fake libraries
// run themselves, are not among them).

// countVar, set in TestStepSyncs' child, names the fake libcuda the counting one forwards to.
const countVar = "TAPE_TEST_COUNT_REAL_CUDA"

// stepCounts is one model's calls per training step, as the child reports them.
type stepCounts struct {
	Model    string
	BN       int            // BatchNorm layers
	Syncs    float64        // host synchronisations per step
	Launches float64        // kernel launches per step
	Calls    map[string]int // every counted driver function over the measured steps
}

// countingModels are the models TestStepSyncs steps: resnet18 at its widths, and resnet50's
// 53 BatchNorms at small widths (the BatchNorm-heavy case), each as a State's program and
// under device DDP at world size 1 (cuda/devddp over an NCCL group of one, the trainer's
// -strategy ddp on one GPU: buckets all-reduced by the NCCL worker).
var countingModels = []struct {
	name string
	cfg  resnet.Config
	bn   int
	hw   int
	ddp  bool
}{
	{"resnet18", resnet18, 20, 16, false},
	{"resnet50-narrow", resnet50Narrow, 53, 16, false},
	{"resnet18 ddp", resnet18, 20, 16, true},
	{"resnet50-narrow ddp", resnet50Narrow, 53, 16, true},
}

var (
	resnet18       = resnet.Config{Block: resnet.Basic, Layers: [4]int{2, 2, 2, 2}, NumClasses: 10}
	resnet50Narrow = resnet.Config{Block: resnet.Bottleneck, Layers: [4]int{3, 4, 6, 3}, Widths: [4]int{4, 4, 8, 8}, StemWidth: 8, NumClasses: 10}
)

// The training step of a device State synchronises with the host once: the inputs go in
// and the running statistics stay on the device without a wait, and the loss, the logits
// and the statistics come back together. The child's counts per step are printed; neither
// model may exceed maxStepSyncs (a synchronisation per BatchNorm made 84 and 216), or under
// DDP that and one wait of the NCCL worker per bucket.
func TestStepSyncs(t *testing.T) {
	if os.Getenv(countVar) != "" {
		countChild(t)
		return
	}
	cudatest.Require(t)
	if realGPU {
		t.Skip("counts the fake libcuda's calls")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(filepath.Join(dir, "counting.c"), []byte(countingLib), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, filepath.Join(dir, "counting.c"), "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("building the counting libcuda: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStepSyncs$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), countVar+"="+os.Getenv("CUDA_DRIVER_LIBRARY"), "CUDA_DRIVER_LIBRARY="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var got []stepCounts
	for _, line := range strings.Split(string(out), "\n") {
		if _, js, ok := strings.Cut(line, "STEPCOUNTS "); ok {
			var c stepCounts
			if err := json.Unmarshal([]byte(js), &c); err != nil {
				t.Fatalf("child's line %q: %v", line, err)
			}
			got = append(got, c)
		}
	}
	if len(got) != len(countingModels) {
		t.Fatalf("child reported %d models, want %d:\n%s", len(got), len(countingModels), out)
	}
	for _, c := range got {
		t.Logf("%s (%d BatchNorms): %.1f host syncs and %.1f kernel launches per training step; calls over the measured steps: %v", c.Model, c.BN, c.Syncs, c.Launches, c.Calls)
		bound := maxStepSyncs
		if strings.HasSuffix(c.Model, " ddp") {
			bound += ddpBuckets // the NCCL worker sees each bucket's all-reduce complete, on its own thread
		}
		if c.Syncs > float64(bound) {
			t.Errorf("%s: %.1f host syncs per step, want at most %d", c.Model, c.Syncs, bound)
		}
		if c.Launches < float64(c.BN) {
			t.Errorf("%s: %.1f launches per step for %d BatchNorms: the counting library missed the launches", c.Model, c.Launches, c.BN)
		}
	}
}

// maxStepSyncs bounds a step's host synchronisations: the Run's one, after the loss, the
// outputs and the running statistics were queued back (Note [One synchronisation per Run]).
const maxStepSyncs = 1

// ddpBuckets bounds the all-reduces of a counted model's step under ddp's default bucket
// sizes (resnet18 makes 4, resnet50-narrow 1).
const ddpBuckets = 4

// countChild runs in the child: it steps each model measureFrom..measureTo and prints the
// counts per step.
func countChild(t *testing.T) {
	l, err := dl.Open([]string{os.Getenv("CUDA_DRIVER_LIBRARY")})
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]int {
		f, err := l.Sym("countingRead")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for i := 0; ; i++ {
			name, err := l.Sym("countingName")
			if err != nil {
				t.Fatal(err)
			}
			s := dl.CallString(name, i)
			if s == "" {
				break
			}
			m[s] = dl.Call(f, uintptr(i))
		}
		return m
	}
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	const batch, warm, steps = 2, 2, 3
	for _, c := range countingModels {
		root, err := resnet.New(c.cfg)
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
		build := nn.Classify(batch, []int{3, c.hw, c.hw}, 0.1)
		var p train.Program
		var done func()
		if c.ddp {
			p, done = ddpOfOne(t, ctx, d, m, build, nn.WithOptimizer(sgd))
		} else {
			st, err := tape.NewState(d, m)
			if err != nil {
				t.Fatal(err)
			}
			tp, err := st.Compile(build, nn.WithOptimizer(sgd))
			if err != nil {
				t.Fatal(err)
			}
			p, done = tp, func() { tp.Close(); st.Close() }
		}
		rng := rand.New(rand.NewSource(3))
		x, y := make([]float32, batch*3*c.hw*c.hw), make([]float32, batch)
		var before map[string]int
		for s := range warm + steps {
			if s == warm {
				before = read()
			}
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for i := range y {
				y[i] = float32(rng.Intn(10))
			}
			if err := p.SetInput("images", x); err != nil {
				t.Fatal(err)
			}
			if err := p.SetInput("labels", y); err != nil {
				t.Fatal(err)
			}
			if err := train.RunStep(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		after := read()
		calls := map[string]int{}
		for k, v := range after {
			if v != before[k] {
				calls[k] = v - before[k]
			}
		}
		syncs := 0
		for _, k := range []string{"cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuStreamQuery:idle", "cuEventQuery:done",
			"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2"} {
			syncs += calls[k]
		}
		out, _ := json.Marshal(stepCounts{Model: c.name, BN: c.bn, Syncs: float64(syncs) / steps,
			Launches: float64(calls["cuLaunchKernel"]) / steps, Calls: calls})
		fmt.Printf("STEPCOUNTS %s\n", out)
		done()
	}
}

// ddpOfOne is device DDP of m over an NCCL group of one on dev (as the trainer's -strategy
// ddp at world size 1) compiled with build and opts; done releases it.
func ddpOfOne(t *testing.T, ctx context.Context, dev *cuda.Device, m *nn.Model, build nn.BuildFunc, opts ...nn.BuildOption) (train.Program, func()) {
	srv, err := store.Listen("127.0.0.1:0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store, err := store.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	g, err := nccl.New(ctx, store, 0, 1, nccl.WithDevice(0))
	if err != nil {
		t.Fatal(err)
	}
	host := comm.NewLocalGroups(1)
	be := devddp.NewBackend(dev, g)
	d, err := ddp.New(ctx, m, host[0], ddp.WithBackend(be))
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Compile(build, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, func() {
		p.Close()
		be.Close()
		g.Close(context.Background())
		host[0].Close(context.Background())
	}
}

// countingLib is a libcuda.so.1 that forwards every driver function package driver binds
// to the library $TAPE_TEST_COUNT_REAL_CUDA names, counting the calls made from outside it
// (a call the fake makes to its own exported functions is not counted again), the
// cuStreamQuery calls that found their stream idle under "cuStreamQuery:idle" and the
// cuEventQuery calls that found their event complete under "cuEventQuery:done". Every
// function takes integer-class arguments and returns an int (see package dl), so one
// forwarder of 12 such arguments serves them all.
const countingLib = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
typedef uintptr_t u;
typedef int (*fwd)(u, u, u, u, u, u, u, u, u, u, u, u);
static void* real;
static __thread int depth;
#define NAMES X(0, cuInit) X(1, cuDriverGetVersion) X(2, cuDeviceGetCount) X(3, cuDeviceGet) \
	X(4, cuDeviceGetName) X(5, cuDeviceGetAttribute) X(6, cuDeviceTotalMem_v2) X(7, cuDevicePrimaryCtxRetain) \
	X(8, cuDevicePrimaryCtxRelease_v2) X(9, cuCtxSetCurrent) X(10, cuCtxSynchronize) X(11, cuMemAlloc_v2) \
	X(12, cuMemFree_v2) X(13, cuMemGetInfo_v2) X(14, cuMemcpyHtoD_v2) X(15, cuMemcpyDtoH_v2) X(16, cuMemcpyDtoD_v2) \
	X(17, cuMemcpyHtoDAsync_v2) X(18, cuMemcpyDtoHAsync_v2) X(19, cuMemcpyDtoDAsync_v2) X(20, cuMemsetD32Async) \
	X(21, cuMemHostAlloc) X(22, cuMemFreeHost) X(23, cuStreamCreate) X(24, cuStreamDestroy_v2) \
	X(25, cuStreamSynchronize) X(26, cuStreamQuery) X(27, cuStreamWaitEvent) X(28, cuEventCreate) \
	X(29, cuEventDestroy_v2) X(30, cuEventRecord) X(31, cuEventQuery) X(32, cuEventSynchronize) \
	X(33, cuEventElapsedTime) X(34, cuModuleLoadData) X(35, cuModuleUnload) X(36, cuModuleGetFunction) \
	X(37, cuLaunchKernel) X(38, cuGetErrorString)
enum { N = 39, IDLE = 39, DONE = 40 };
static long counts[N + 2];
static fwd fns[N];
static const char* names[N + 3] = {
#define X(i, f) #f,
NAMES
#undef X
	"cuStreamQuery:idle", "cuEventQuery:done", 0 };
static int forward(int i, u a, u b, u c, u d, u e, u f, u g, u h, u j, u k, u l, u m) {
	if (!real) real = dlopen(getenv("` + countVar + `"), RTLD_NOW | RTLD_GLOBAL);
	if (!real) return 999;
	if (!fns[i]) fns[i] = (fwd)dlsym(real, names[i]);
	if (!fns[i]) return 500;
	int top = depth == 0;
	depth++;
	int r = fns[i](a, b, c, d, e, f, g, h, j, k, l, m);
	depth--;
	if (top) {
		__sync_fetch_and_add(&counts[i], 1);
		if (i == 26 && r == 0) __sync_fetch_and_add(&counts[IDLE], 1);
		if (i == 31 && r == 0) __sync_fetch_and_add(&counts[DONE], 1);
	}
	return r;
}
#define X(i, f) int f(u a, u b, u c, u d, u e, u g, u h, u j, u k, u l, u m, u n) { return forward(i, a, b, c, d, e, g, h, j, k, l, m, n); }
NAMES
#undef X
int countingRead(int i) { return i >= 0 && i <= DONE ? (int)counts[i] : -1; }
const char* countingName(int i) { return i >= 0 && i <= DONE ? names[i] : ""; }
`
