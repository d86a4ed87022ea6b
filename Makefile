# gorgonia-parallel: the two commands are `make demo` and `make test`.
# Each installs what it needs (OpenBLAS from Debian) before it runs.

GO      ?= go
SHELL   := /bin/bash
PKGS    ?= ./...
# Tests run the BLAS with one thread per process: several ranks share 2 cores.
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: test-fuzz
.PHONY: all deps test test-cgo test-levels test-purego cross vet demo demo-synthetic bench bench-ops bench-models bench-comm bench-tta \
        bench-ddp bench-dp bench-data bench-zero bench-amp bench-report gpu-check ptx-clang fixtures clean test-examples

all: test

## deps: install the system packages the fast path links against (Debian's OpenBLAS).
deps:
	@bash scripts/install-deps.sh

## test: vet, the full test suite with OpenBLAS at the best SIMD level this CPU has, the
## kernel and model tests again at every lower level it has (GP_SIMD), the pure-Go
## (CGO_ENABLED=0) build and its tests, the examples as a user runs them, and the cross
## builds (macOS, Windows, arm64).
test: deps vet test-cgo test-levels test-purego test-examples cross test-fuzz

vet:
	$(GO) vet $(PKGS)

test-cgo:
	$(GO) test -count=1 -timeout 25m $(PKGS)

# The packages whose results depend on the SIMD level: the kernels, the ops and models
# built on them (gradient checks, PyTorch fixtures), the optimizers and autocast.
LEVEL_PKGS ?= ./internal/simd/... ./nn/... ./models/... ./optim/... ./amp/...

## test-levels: LEVEL_PKGS at each SIMD level below the best (simdlevels says which levels
## this CPU lacks, and why, on standard error).
test-levels:
	@levels=$$($(GO) run ./internal/simd/simdlevels -below-best) || exit 1; \
	for l in $$levels; do \
		echo "== GP_SIMD=$$l"; \
		GP_SIMD=$$l $(GO) test -count=1 -timeout 10m $(LEVEL_PKGS) || exit 1; \
	done

## test-examples: build gprun and the examples/gorgonia programs and run each for a few
## steps as its doc comment says (ddp, solver, zero3 and trainer under gprun with 2
## processes, trainer for one epoch and then, resuming from its checkpoint, a second; the
## solver's weights against single's are examples/gorgonia/solver's test); any non-zero
## exit fails. They run as binaries rather than from a Go test so that what is checked is
## what a user types, launcher included.
EXAMPLE_STEPS ?= 100
test-examples:
	$(GO) build -o bin/gprun ./cmd/gprun
	@mkdir -p bin/examples
	$(GO) build -o bin/examples/ ./examples/gorgonia/...
	bin/examples/single -steps $(EXAMPLE_STEPS)
	bin/examples/dp -steps $(EXAMPLE_STEPS)
	bin/gprun --nproc-per-node 2 -- bin/examples/ddp -steps $(EXAMPLE_STEPS)
	bin/gprun --nproc-per-node 2 -- bin/examples/solver -steps $(EXAMPLE_STEPS)
	bin/gprun --nproc-per-node 2 -- bin/examples/zero3 -steps $(EXAMPLE_STEPS)
	rm -rf bin/examples/runs/convnet
	bin/gprun --nproc-per-node 2 -- bin/examples/trainer -epochs 1 -out bin/examples/runs/convnet
	bin/gprun --nproc-per-node 2 -- bin/examples/trainer -epochs 2 -out bin/examples/runs/convnet

## test-fuzz: every fuzz target (func FuzzXxx) for FUZZTIME each, one at a time on one worker,
## from its seeds and committed corpus (each package's testdata/fuzz/FuzzXxx) in a fresh cache,
## so every run starts from the same inputs (bench/fuzz prints the table). A crasher fails it; go test writes the input under the package's
## testdata/fuzz/FuzzXxx/, to commit with the parser's fix. 5 s each keeps make test within
## about 15 minutes on 2 idle cores (20 targets: about 2 minutes with the builds); longer runs
## are bench/fuzz's (go run ./bench/fuzz -fuzztime 5m).
FUZZTIME ?= 5s
test-fuzz:
	$(GO) run ./bench/fuzz -fresh-cache -fuzztime $(FUZZTIME)

## cross: vet (which compiles the tests too) with CGO_ENABLED=0 for linux, macOS and
## Windows on amd64 and arm64.
cross:
	bash scripts/cross-build.sh

test-purego:
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 10m ./nn/... ./optim/... ./data/...

## demo: the main job: train on Fashion-MNIST (Debian's dataset-fashion-mnist, installed by
## deps) with DDP on 2 processes (gprun): all 60,000 training images for 8 epochs, top-1 on
## all 10,000 test images after each, then the plot, metrics, TensorBoard files and timelines
## in runs/demo. Goal: >= 91% test top-1 in under 8 minutes on 2 cores. The model is
## resnet8_s2 (He et al.'s CIFAR ResNet-8, 16/32/64 channels, 78k parameters, with a stride-2
## 3x3 stem: the stages see 14x14, 7x7, 4x4): within a few hundred CPU-seconds it reaches
## more accuracy per CPU-second than the stride-1 resnet8 and the wider resnet8_w24_s2 and
## resnet8_w32_s2. bench/tta times this job against PyTorch's.
## Recipe: SGD momentum 0.9, lr 0.2 for batch 128, cosine to 0 without warmup, weight decay
## 5e-4, label smoothing 0.1, horizontal flip only (a padded crop slows convergence within 8
## epochs; -crop-pad 2 turns it on), input normalised with the data set's mean and std.
DEMO_FLAGS ?= -data-format fashion-mnist -arch resnet8_s2 -image-size 28 -b 128 -epochs 8 \
	-sched cosine -warmup-epochs 0 -lr 0.2 -wd 5e-4 -label-smoothing 0.1 -j 1 -print-freq 100 \
	-out runs/demo -resume none
demo: deps
	$(GO) build -o bin/gprun ./cmd/gprun
	$(GO) build -o bin/imagenet ./examples/imagenet
	rm -rf runs/demo
	bin/gprun --nproc-per-node 2 -- bin/imagenet $(DEMO_FLAGS)

## demo-synthetic: a check of the JPEG pipeline: generate (once) a 10-class ImageFolder of JPEGs, then
## train resnet18 on 32x32 crops for 10 epochs (about two minutes; the generated classes are
## easy, so it reaches 100%).
DEMO_SYNTHETIC_FLAGS ?= -data-format synthetic -data .cache/synthetic-10 -arch resnet18 -image-size 32 \
	-b 64 -epochs 10 -sched cosine -warmup-epochs 1 -lr 0.2 -wd 5e-4 -j 1 -print-freq 5 \
	-out runs/demo-synthetic -resume none
demo-synthetic: deps
	$(GO) build -o bin/gprun ./cmd/gprun
	$(GO) build -o bin/imagenet ./examples/imagenet
	rm -rf runs/demo-synthetic
	bin/gprun --nproc-per-node 2 -- bin/imagenet $(DEMO_SYNTHETIC_FLAGS)

## bench: every benchmark; each prints a table and writes bench/results/*.json.
## Benchmarks that compare with PyTorch use Debian's python3-torch when it is installed
## (apt-get install python3-torch python3-torchvision libopenblas0-pthread) and say so when not.
bench: bench-ops bench-models bench-comm bench-ddp bench-dp bench-data bench-zero bench-amp

## bench-tta: time to 91% test top-1 on the demo's job, ours against PyTorch DDP (gloo) with
## the same model, initial weights and recipe, three times in alternating order; the ratio is
## the median (bench/results/tta.json; about 15 minutes on 2 cores).
bench-tta: deps
	$(GO) run ./bench/tta

## bench-report: write bench/README.md, the benchmark page, from bench/results/*.json (every
## table with the command, machine, CPU flags and load its file records).
bench-report:
	$(GO) run ./bench/report

bench-ops: deps
	OPENBLAS_NUM_THREADS=1 $(GO) run ./bench/ops

bench-models: deps
	$(GO) run ./bench/models

bench-comm: deps
	$(GO) run ./bench/comm

bench-ddp: deps
	$(GO) run ./bench/ddp

bench-dp: deps
	$(GO) run ./bench/dp

bench-data: deps
	$(GO) run ./bench/data

bench-zero: deps
	$(GO) run ./bench/zero

bench-amp: deps
	$(GO) run ./bench/amp

## gpu-check: build the GPU check (the check and executor test binaries, the trainer, run.sh,
## the PyTorch side and the table script) into build/gpu-check; copy that folder to a GPU
## machine (no Go needed there) and run build/gpu-check/run.sh. Nothing here needs CUDA.
## EMULATE=1 also builds the fake GPU libraries into it, for EMULATE=1 build/gpu-check/run.sh.
gpu-check:
	EMULATE=$(EMULATE) bash cuda/gpucheck/build.sh build/gpu-check

## ptx-clang: compile cuda/kernels/kernels.cu with clang's NVPTX backend (no CUDA toolkit) and
## check that every kernel is an entry point and the stand-in math is accurate; skipped, saying
## so, where clang is not installed. PTX_OUT=cuda/kernels/kernels.ptx also rewrites the embedded PTX.
ptx-clang:
	bash cuda/kernels/clang-ptx.sh $(PTX_OUT)

## fixtures: regenerate the committed PyTorch fixtures (needs Debian's python3-torch).
fixtures:
	/usr/bin/python3 testdata/make_fixtures.py

clean:
	$(GO) clean -testcache
