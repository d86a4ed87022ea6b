package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/amp"
	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/models/swin"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/nn/ops"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
	G "gorgonia.org/gorgonia"
)

// Result summarises a finished run.
type Result struct {
	Steps      int64
	Epochs     int
	FinalLoss  float64
	Top1, Top5 float64 // last validation accuracy, percent
	Evaluated  bool    // a validation ran (Top1 and Top5 are its)
	// EMATop1 and EMATop5 are the last validation accuracy of the weights' moving average
	// (-model-ema), percent.
	EMATop1, EMATop5 float64
	ImgsPerS         float64 // training images per second over all ranks
	OverlapFrac      float64 // fraction of all-reduce time hidden behind backward (DDP)
	RSSBytes         []float64
	// ModelStateBytes is what this rank holds of parameters, gradients and optimizer state
	// between steps (ZeRO-3 only; a replicated rank holds 16 bytes per parameter under AdamW).
	ModelStateBytes int64
	// LossHistory is this rank's training loss of each of the last (at most)
	// LossHistorySteps steps of this run, oldest first: a bounded tail (32 KiB), since a run
	// may take millions of steps; metrics.jsonl has every logged step.
	LossHistory []float64
	ResumedFrom string
	Checkpoint  string
	MetricsPath string
	PlotPath    string // "" when no plot was written
	// TensorBoardPath is the event file rank 0 wrote (-tensorboard), "" when none.
	TensorBoardPath string
	TimelinePaths   []string
}

// LossHistorySteps bounds Result.LossHistory.
const LossHistorySteps = 4096

// Run trains (or, with Evaluate, evaluates) as cfg says. It joins the process group the
// torchrun environment describes (one process when WORLD_SIZE is unset). Progress goes to
// out on rank 0.
//
// When Run fails on this rank alone (a bad image, a full disk), it aborts the group it
// joined with its error (comm.Abort), so that the other ranks' collectives fail at once
// naming this rank and the error instead of waiting for it; a group passed in cfg.Group is
// the caller's to abort or close.
func Run(ctx context.Context, cfg Config, out io.Writer) (_ *Result, err error) {
	if err := cfg.recipe(); err != nil {
		return nil, err
	}
	strat, err := strategyOf(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	g := cfg.Group
	if g == nil {
		if g, err = joinGroup(ctx, cfg.commOptions()...); err != nil {
			return nil, err
		}
		defer func() { leaveGroup(g, err) }()
	}
	rank, world := g.Rank(), g.Size()
	if cfg.Batch%world != 0 {
		return nil, fmt.Errorf("trainer: global batch %d is not divisible by the world size %d", cfg.Batch, world)
	}
	local := cfg.Batch / world
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("rank", rank)
	if rank != 0 {
		out = io.Discard
	}

	train, val, err := openData(ctx, g, &cfg, log)
	if err != nil {
		return nil, err
	}
	if cfg.NumClasses == 0 {
		cfg.NumClasses = train.classes
	}
	module, err := newModule(&cfg)
	if err != nil {
		return nil, err
	}
	mopts := []nn.ModelOption{nn.WithSeed(cfg.Seed)}
	if !strat.sharded {
		// DDP all-reduces the gradients in place when the ranks share this host's memory.
		mopts = append(mopts, ddp.SharedGradients(ctx, g))
	}
	model, err := nn.NewModel(module, mopts...)
	if err != nil {
		return nil, err
	}
	if cfg.Pretrained != "" {
		if err := models.LoadWeights(model.Params, cfg.Pretrained); err != nil {
			return nil, fmt.Errorf("trainer: -pretrained: %w", err)
		}
	}

	shape := [3]int{train.c, train.h, train.w}
	eng, err := strat.newEngine(ctx, &cfg, strat, g, model, shape, log)
	if err != nil {
		return nil, err
	}
	// An optimizer step takes GradAccum batches; an epoch's leftover batches (fewer than
	// GradAccum) are dropped, as drop_last drops a short batch.
	stepsPerEpoch := train.steps / cfg.GradAccum
	if stepsPerEpoch == 0 {
		return nil, fmt.Errorf("trainer: the training set (%d images) is smaller than %d batches of %d per rank (-grad-accum-steps %d)",
			train.images, cfg.GradAccum, local, cfg.GradAccum)
	}
	opt := eng.optimizer()
	sched, err := newSchedule(opt, &cfg, stepsPerEpoch)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	meta := &checkpoint.State{Scheduler: sched, RNG: map[string]checkpoint.RNG{"dropout": rngState{model.RNG}}}
	if res.ResumedFrom, err = eng.resume(ctx, cfg.Resume, meta); err != nil {
		return nil, err
	}
	if res.ResumedFrom != "" {
		fmt.Fprintf(out, "resumed from %s at step %d (epoch %d)\n", res.ResumedFrom, meta.Step, meta.Epoch)
	}
	if first := int64(cfg.StartEpoch * stepsPerEpoch); first > meta.Step {
		// -start-epoch: the schedule goes on to the epoch's first step, as PyTorch's
		// main.py starting its loop there and timm's scheduler.step(start_epoch) do.
		for range first - meta.Step {
			sched.Step()
		}
		meta.Step, meta.Epoch = first, int64(cfg.StartEpoch)
		fmt.Fprintf(out, "starting at epoch %d (step %d, lr %.4g)\n", cfg.StartEpoch, first, opt.LR())
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil && rank == 0 {
		return nil, fmt.Errorf("trainer: run directory %s: %w", cfg.Out, err)
	}
	evaluate := func() (loss, top1, top5 float64, err error) {
		return evaluate(ctx, g, val, eng, cfg.NumClasses, strat.sharded)
	}
	ema, _ := eng.(emaEngine)
	if cfg.ModelEMA && (ema == nil || ema.modelEMA() == nil) {
		return nil, fmt.Errorf("trainer: -model-ema: the %s strategy keeps no average of the weights", cfg.Strategy)
	}
	// evaluateEMA evaluates the averaged weights (-model-ema) in place of the trained ones.
	evaluateEMA := func() (loss, top1, top5 float64, err error) {
		err = ema.modelEMA().swapped(func() error {
			loss, top1, top5, err = evaluate()
			return err
		})
		return loss, top1, top5, err
	}
	if cfg.Evaluate {
		_, top1, top5, err := evaluate()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "evaluate: top-1 %.2f%%  top-5 %.2f%% on %d images\n", top1, top5, val.images)
		res.Top1, res.Top5, res.Evaluated = top1, top5, true
		return res, nil
	}
	saved := int64(-1) // the step of the last checkpoint this run wrote
	save := func(step int64, epoch int) error {
		meta.Step, meta.Epoch = step, int64(epoch)
		var err error
		res.Checkpoint, err = eng.save(ctx, meta)
		saved = step
		return err
	}

	var metrics *Metrics
	if rank == 0 {
		res.MetricsPath = filepath.Join(cfg.Out, "metrics.jsonl")
		// A resumed run redoes the steps after its checkpoint: their records, written by the
		// attempt that was interrupted, go, so that the log holds each step once.
		if metrics, err = OpenMetrics(res.MetricsPath, meta.Step); err != nil {
			return nil, err
		}
		defer metrics.Close()
		if cfg.TensorBoard {
			if res.TensorBoardPath, err = metrics.OpenTensorBoard(cfg.Out); err != nil {
				return nil, err
			}
		}
	}
	accum := ""
	if cfg.GradAccum > 1 {
		accum = fmt.Sprintf(" x %d accumulated", cfg.GradAccum)
	}
	fmt.Fprintf(out, "train: %s, %d parameters, %d ranks x batch %d%s, %d steps/epoch, %s lr %.4g, %s schedule, image %dx%d, %d classes\n",
		cfg.Arch, model.Params.NumParams(), world, local, accum, stepsPerEpoch, cfg.Optimizer, cfg.LR, cfg.Sched, shape[2], shape[1], cfg.NumClasses)

	step, firstStep := meta.Step, meta.Step
	startEpoch := int(step) / stepsPerEpoch
	bar := newProgress(out, cfg.Progress, cfg.Quiet || rank != 0)
	start := time.Now()
	imagesSeen := 0
	lossBuf := []float64{0, 0}
	stop := false
	for epoch := startEpoch; epoch < cfg.Epochs && !stop; epoch++ {
		skip := int(step) - epoch*stepsPerEpoch // optimizer steps of this epoch done before a resume
		bar.start(epoch, cfg.Epochs, stepsPerEpoch, skip)
		var epochLoss, stepLoss float64
		var n, k int // optimizer steps of this epoch in this run; batches of the current step
		for batch, err := range train.batches(ctx, epoch, skip*cfg.GradAccum) {
			if err != nil {
				return nil, err
			}
			if n+skip == stepsPerEpoch {
				break // the leftover batches of a -grad-accum-steps epoch
			}
			if batch.N != local {
				return nil, fmt.Errorf("trainer: rank %d: batch of %d images, want %d (a skipped bad file?)", rank, batch.N, local)
			}
			k++
			at := micro{pos: step*int64(cfg.GradAccum) + int64(k-1), last: k == cfg.GradAccum}
			lv, err := eng.trainStep(ctx, batch, at)
			if err != nil {
				return nil, err
			}
			stepLoss += float64(lv)
			if !at.last {
				continue
			}
			lv, stepLoss, k = float32(stepLoss/float64(cfg.GradAccum)), 0, 0
			maybeKill(&cfg, rank, step+1)
			if err := eng.update(ctx); err != nil {
				return nil, fmt.Errorf("trainer: step %d: %w", step+1, err)
			}
			if ema != nil && ema.modelEMA() != nil {
				ema.modelEMA().update()
			}
			sched.Step()
			step++
			imagesSeen += local * world * cfg.GradAccum
			epochLoss += float64(lv)
			n++
			res.LossHistory = keepLast(append(res.LossHistory, float64(lv)), LossHistorySteps)
			if step%int64(cfg.PrintFreq) == 0 || n+skip == stepsPerEpoch {
				// The logged loss is the mean over ranks: one tiny all-reduce every print-freq steps.
				lossBuf[0], lossBuf[1] = epochLoss/float64(n), float64(lv)
				if err := g.AllReduce(comm.F64(lossBuf), comm.Avg).Wait(ctx); err != nil {
					return nil, err
				}
				ips := float64(imagesSeen) / time.Since(start).Seconds()
				bar.update(n+skip, step, lossBuf[0], opt.LR(), ips)
				if metrics != nil {
					if err := metrics.Add(Record{Kind: "train", Epoch: epoch, Step: step, Loss: lossBuf[0], StepLoss: lossBuf[1], LR: opt.LR(), ImgsPerS: ips, ElapsedS: time.Since(start).Seconds(), LossScale: lossScaleOf(eng)}); err != nil {
						return nil, err
					}
				}
			}
			if cfg.CkptEvery > 0 && step%int64(cfg.CkptEvery) == 0 {
				if err := save(step, epoch); err != nil {
					return nil, err
				}
			}
			if cfg.FailAtStep > 0 && step == cfg.FailAtStep && firstAttempt() {
				fmt.Fprintf(os.Stderr, "trainer: rank %d: failing on purpose after step %d (-fail-at-step)\n", rank, step)
				os.Exit(3)
			}
			if cfg.MaxSteps > 0 && step >= int64(cfg.MaxSteps) {
				stop = true
				break
			}
		}
		bar.finish()
		if n > 0 {
			// The epoch's loss as the console and the summary show it: the mean over ranks,
			// as metrics.jsonl has it.
			lossBuf[0] = epochLoss / float64(n)
			if err := g.AllReduce(comm.F64(lossBuf[:1]), comm.Avg).Wait(ctx); err != nil {
				return nil, err
			}
			res.FinalLoss = lossBuf[0]
		}
		res.Epochs = epoch + 1
		if stop && n+skip < stepsPerEpoch {
			break // a partial epoch (-max-steps): no evaluation
		}
		vloss, top1, top5, err := evaluate()
		if err != nil {
			return nil, err
		}
		res.Top1, res.Top5, res.Evaluated = top1, top5, true
		fmt.Fprintf(out, "epoch %d/%d  train loss %.4f  val loss %.4f  top-1 %.2f%%  top-5 %.2f%%  %.0f img/s\n",
			epoch+1, cfg.Epochs, res.FinalLoss, vloss, top1, top5, float64(imagesSeen)/time.Since(start).Seconds())
		// The validation record goes before the checkpoint: a crash between the two leaves a
		// record that the resumed run drops and writes again, never a missing one.
		if rank == 0 {
			if err := metrics.Add(Record{Kind: "val", Epoch: epoch, Step: step, Loss: vloss, Top1: top1, Top5: top5, ElapsedS: time.Since(start).Seconds()}); err != nil {
				return nil, err
			}
		}
		if cfg.ModelEMA {
			eloss, etop1, etop5, err := evaluateEMA()
			if err != nil {
				return nil, err
			}
			res.EMATop1, res.EMATop5 = etop1, etop5
			fmt.Fprintf(out, "epoch %d/%d  EMA of the weights: val loss %.4f  top-1 %.2f%%  top-5 %.2f%%\n", epoch+1, cfg.Epochs, eloss, etop1, etop5)
			if rank == 0 {
				if err := metrics.Add(Record{Kind: "val_ema", Epoch: epoch, Step: step, Loss: eloss, Top1: etop1, Top5: etop5, ElapsedS: time.Since(start).Seconds()}); err != nil {
					return nil, err
				}
			}
		}
		if err := save(step, epoch+1); err != nil {
			return nil, err
		}
		if rank == 0 {
			if err := metrics.Plot(filepath.Join(cfg.Out, "curves.png")); err != nil {
				return nil, err
			}
			res.PlotPath = filepath.Join(cfg.Out, "curves.png")
		}
	}
	res.Steps = step
	if n := len(res.LossHistory); n > LossHistorySteps {
		res.LossHistory = append([]float64(nil), res.LossHistory[n-LossHistorySteps:]...)
	}
	res.ImgsPerS = float64(imagesSeen) / time.Since(start).Seconds()
	if step > firstStep && step != saved {
		// A run that stopped between checkpoints (-max-steps) ends with one, so that a later
		// run resumes where this one stopped.
		if err := save(step, int(step)/stepsPerEpoch); err != nil {
			return nil, err
		}
	}
	if err := eng.report(ctx, &cfg, res); err != nil {
		return nil, err
	}
	if rank == 0 {
		if res.PlotPath == "" && step > 0 {
			// A run that ended before its first validation still plots its training curves.
			if err := metrics.Plot(filepath.Join(cfg.Out, "curves.png")); err != nil {
				return nil, err
			}
			res.PlotPath = filepath.Join(cfg.Out, "curves.png")
		}
		if res.ModelStateBytes == 0 { // replicated: the fraction of all-reduce hidden behind backward
			if err := metrics.Scalar("train/overlap", step, res.OverlapFrac); err != nil {
				return nil, err
			}
		}
	}
	if err := finishReport(ctx, g, &cfg, res, out); err != nil {
		return nil, err
	}
	return res, nil
}

// newModule builds cfg's architecture; -drop-path sets a Swin's stochastic depth.
func newModule(cfg *Config) (nn.Module, error) {
	if cfg.DropPath < 0 || !strings.HasPrefix(cfg.Arch, "swin") {
		return models.New(cfg.Arch, cfg.NumClasses)
	}
	c, err := swin.Arch(cfg.Arch, cfg.NumClasses)
	if err != nil {
		return nil, err
	}
	c.StochasticDepth = cfg.DropPath
	return swin.New(c)
}

// keepLast trims h to its last n values once it holds 2n, so that appending to it one value
// at a time costs amortised O(1) and holds at most 2n; the caller trims the final result.
func keepLast(h []float64, n int) []float64 {
	if len(h) < 2*n {
		return h
	}
	return append(h[:0], h[len(h)-n:]...)
}

// buildFor builds the classification graph for a batch of n images: inputs "images"
// [n,c,h,w] and "labels" [n], output "logits", and in train mode the cross-entropy loss,
// multiplied by the loss scale when a scaler is given. With soft set (mixup, cutmix) the
// training graph takes "targets" [n,classes] instead of "labels" and the loss is the
// cross-entropy against them (label smoothing is in the targets).
func buildFor(n, c, h, w int, smoothing float64, soft bool, classes int, scaler *amp.GradScaler) nn.BuildFunc {
	classify := nn.Classify(n, []int{c, h, w}, smoothing)
	if soft {
		classify = classifySoft(n, []int{c, h, w}, classes)
	}
	if scaler == nil {
		return classify
	}
	return func(b *nn.Builder) (*G.Node, error) {
		loss, err := classify(b)
		if err != nil || loss == nil {
			return loss, err
		}
		return scaler.ScaleLoss(b, loss)
	}
}

// classifySoft is nn.Classify with soft targets: inputs "images" [batch, shape...] and, in
// train mode, "targets" [batch, classes]; output "logits"; loss ops.SoftCrossEntropy.
func classifySoft(batch int, shape []int, classes int) nn.BuildFunc {
	return func(b *nn.Builder) (*G.Node, error) {
		x, err := b.Input("images", append([]int{batch}, shape...)...)
		if err != nil {
			return nil, err
		}
		if !b.Training() {
			logits, err := b.Forward(x)
			if err == nil {
				b.Output("logits", logits)
			}
			return nil, err
		}
		t, err := b.Input("targets", batch, classes)
		if err != nil {
			return nil, err
		}
		logits, err := b.Forward(x)
		if err != nil {
			return nil, err
		}
		b.Output("logits", logits)
		return ops.SoftCrossEntropy(logits, t)
	}
}

// fillInputs copies a batch into the inputs that input returns.
func fillInputs(input func(string) ([]float32, error), b *data.Batch) error {
	x, err := input("images")
	if err != nil {
		return err
	}
	if len(x) != b.N*b.C*b.H*b.W {
		return fmt.Errorf("trainer: the graph's images input holds %d values, the batch %d", len(x), b.N*b.C*b.H*b.W)
	}
	copy(x, b.Images)
	y, err := input("labels")
	if err != nil {
		return err
	}
	for i := range y {
		y[i] = float32(b.Labels[i])
	}
	return nil
}

// leaveGroup closes g after a run that succeeded and aborts it with err after one that
// failed. It does not use Run's context, which may be what ended the run.
func leaveGroup(g comm.Group, err error) {
	if err != nil {
		comm.Abort(context.Background(), g, err)
		return
	}
	g.Close(context.Background())
}

// joinGroup joins the job's process group, or makes a group of one without WORLD_SIZE (or
// mpirun's OMPI_COMM_WORLD_SIZE).
func joinGroup(ctx context.Context, opts ...comm.Option) (comm.Group, error) {
	if os.Getenv("WORLD_SIZE") == "" && os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		return comm.NewLocalGroups(1)[0], nil
	}
	return comm.InitFromEnv(ctx, opts...)
}

// rngState adapts the model's dropout RNG to checkpoint.RNG.
type rngState struct{ r *ops.RNG }

func (s rngState) MarshalBinary() ([]byte, error) {
	seed, ctr := s.r.State()
	b := make([]byte, 16)
	for i := 0; i < 8; i++ {
		b[i] = byte(seed >> (8 * i))
		b[8+i] = byte(ctr >> (8 * i))
	}
	return b, nil
}

func (s rngState) UnmarshalBinary(b []byte) error {
	if len(b) != 16 {
		return errors.New("trainer: dropout RNG state must be 16 bytes")
	}
	var seed, ctr uint64
	for i := 0; i < 8; i++ {
		seed |= uint64(b[i]) << (8 * i)
		ctr |= uint64(b[8+i]) << (8 * i)
	}
	s.r.SetState(seed, ctr)
	return nil
}
