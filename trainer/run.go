package trainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/optim"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/ddp"
)

// run is one call of Fit or Validate after its process group is joined: what the phases
// of training (setup, epochs, validation, the end) share.
type run struct {
	cfg         *settings
	spec        Model
	strat       strategy
	g           comm.Group
	rank, world int
	local       int // batch per rank
	out         io.Writer
	log         *slog.Logger
	train, val  *Split // val nil: no validation
	model       *nn.Model
	eng         engine
	ema         *modelEMA // the weights' average (WithEMA); nil without
	opt         optim.Optimizer
	sched       optim.Scheduler
	meta        *checkpoint.State
	res         *Result
	side        *sideOutputs
	perEpoch    int   // optimizer steps per epoch
	step, saved int64 // the last step taken; the step of the last checkpoint this run wrote (-1: none)
	firstStep   int64 // the step this run started from
	imagesSeen  int
	start       time.Time
	bar         *progress
	lossBuf     []float64
	shape       [3]int
}

// newRun opens the data, builds the model and the strategy's engine, and restores the
// checkpoint that cfg.Resume names.
func newRun(ctx context.Context, cfg *settings, strat strategy, g comm.Group, spec Model, src Source) (_ *run, err error) {
	r := &run{cfg: cfg, spec: spec, strat: strat, g: g, rank: g.Rank(), world: g.Size(), out: cfg.out, res: &Result{},
		saved: -1, lossBuf: []float64{0, 0}}
	if cfg.Batch%r.world != 0 {
		return nil, fmt.Errorf("trainer: global batch %d (WithBatchSize, -b) is not divisible by the world size %d", cfg.Batch, r.world)
	}
	r.local = cfg.Batch / r.world
	r.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("rank", r.rank)
	if r.rank != 0 || r.out == nil {
		r.out = io.Discard
	}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	env := Env{Group: g, Rank: r.rank, World: r.world, Batch: r.local, Seed: cfg.Seed, Classes: cfg.NumClasses, Log: r.log}
	if r.train, r.val, err = src.Open(ctx, env); err != nil {
		return nil, err
	}
	if r.train == nil {
		return nil, fmt.Errorf("trainer: the data source gave no training split")
	}
	if r.val != nil && r.val.Classes != r.train.Classes {
		return nil, fmt.Errorf("trainer: the training set has %d classes and the validation set %d", r.train.Classes, r.val.Classes)
	}
	if cfg.NumClasses == 0 {
		cfg.NumClasses = r.train.Classes
	}
	if err := r.buildModel(ctx); err != nil {
		return nil, err
	}
	// An optimizer step takes GradAccum batches; an epoch's leftover batches (fewer than
	// GradAccum) are dropped, as drop_last drops a short batch.
	if r.perEpoch = r.train.Steps / cfg.GradAccum; r.perEpoch == 0 {
		return nil, fmt.Errorf("trainer: the training set (%d images) is smaller than %d batches of %d per rank (gradient accumulation %d)",
			r.train.Images, cfg.GradAccum, r.local, cfg.GradAccum)
	}
	r.opt = r.eng.optimizer()
	if r.sched, err = newSchedule(r.opt, cfg, r.perEpoch); err != nil {
		return nil, err
	}
	if err := r.restore(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil && r.rank == 0 {
		return nil, fmt.Errorf("trainer: run directory %s: %w", cfg.Out, err)
	}
	return r, nil
}

// buildModel builds the model for the data's images and classes and makes the strategy's
// engine.
func (r *run) buildModel(ctx context.Context) error {
	cfg := r.cfg
	mopts := []nn.ModelOption{nn.WithSeed(cfg.Seed)}
	if !r.strat.sharded {
		// DDP all-reduces the gradients in place when the ranks share this host's memory.
		mopts = append(mopts, ddp.SharedGradients(ctx, r.g))
	}
	r.shape = [3]int{r.train.C, r.train.H, r.train.W}
	var err error
	if r.model, cfg.fwd, err = r.spec.build(r.shape, cfg.NumClasses, mopts...); err != nil {
		return err
	}
	if r.eng, err = r.strat.newEngine(ctx, cfg, r.strat, r.g, r.model, r.shape, r.log); err != nil {
		return err
	}
	if ema, ok := r.eng.(emaEngine); ok {
		r.ema = ema.modelEMA()
	}
	if cfg.ModelEMA && r.ema == nil {
		return fmt.Errorf("trainer: an average of the weights (WithEMA, -model-ema): the %s strategy keeps none", cfg.Strategy)
	}
	return nil
}

// restore resumes from -resume's checkpoint and applies -start-epoch.
func (r *run) restore(ctx context.Context) error {
	cfg := r.cfg
	r.meta = &checkpoint.State{Scheduler: r.sched, RNG: map[string]checkpoint.RNG{"dropout": rngState{r.model.RNG}}}
	var err error
	if r.res.ResumedFrom, err = r.eng.resume(ctx, cfg.Resume, r.meta); err != nil {
		return err
	}
	if r.res.ResumedFrom != "" {
		fmt.Fprintf(r.out, "resumed from %s at step %d (epoch %d)\n", r.res.ResumedFrom, r.meta.Step, r.meta.Epoch)
	}
	if first := int64(cfg.StartEpoch * r.perEpoch); first > r.meta.Step {
		// -start-epoch: the schedule goes on to the epoch's first step, as PyTorch's
		// main.py starting its loop there and timm's scheduler.step(start_epoch) do.
		for range first - r.meta.Step {
			r.sched.Step()
		}
		r.meta.Step, r.meta.Epoch = first, int64(cfg.StartEpoch)
		fmt.Fprintf(r.out, "starting at epoch %d (step %d, lr %.4g)\n", cfg.StartEpoch, first, r.opt.LR())
	}
	r.step, r.firstStep, r.res.StartStep = r.meta.Step, r.meta.Step, r.meta.Step
	return nil
}

// evaluate runs the validation set on the trained weights, or with ema on -model-ema's
// average of them.
func (r *run) evaluate(ctx context.Context, ema bool) (loss, top1, top5 float64, err error) {
	if !ema {
		return evaluate(ctx, r.g, r.val, r.eng, r.cfg.NumClasses, r.strat.sharded)
	}
	err = r.ema.swapped(func() error {
		loss, top1, top5, err = evaluate(ctx, r.g, r.val, r.eng, r.cfg.NumClasses, r.strat.sharded)
		return err
	})
	return loss, top1, top5, err
}

// evaluateOnly is Validate: one validation, no training.
func (r *run) evaluateOnly(ctx context.Context) (*Result, error) {
	if r.val == nil {
		return nil, fmt.Errorf("trainer: Validate: the data source has no validation split")
	}
	_, top1, top5, err := r.evaluate(ctx, false)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.out, "evaluate: top-1 %.2f%%  top-5 %.2f%% on %d images\n", top1, top5, r.val.Images)
	r.res.Top1, r.res.Top5, r.res.Evaluated = top1, top5, true
	return r.res, nil
}

// save checkpoints step as of epoch (the epoch a resumed run starts in).
func (r *run) save(ctx context.Context, step int64, epoch int) error {
	r.meta.Step, r.meta.Epoch = step, int64(epoch)
	var err error
	r.res.Checkpoint, err = r.eng.save(ctx, r.meta)
	r.saved = step
	return err
}

// openOutputs opens rank 0's metrics log (and TensorBoard file). A resumed run redoes the
// steps after its checkpoint: their records, written by the attempt that was interrupted,
// go, so that the log holds each step once.
func (r *run) openOutputs() error {
	r.side = &sideOutputs{plotTo: filepath.Join(r.cfg.Out, plotName), log: r.log}
	r.removeStaleTemps()
	if r.rank != 0 {
		return nil
	}
	r.res.MetricsPath = filepath.Join(r.cfg.Out, metricsName)
	m, err := OpenMetrics(r.res.MetricsPath, r.meta.Step)
	if err != nil {
		return err
	}
	r.side.m = m
	if r.cfg.TensorBoard {
		if r.res.TensorBoardPath, err = m.OpenTensorBoard(r.cfg.Out); err != nil {
			return err
		}
	}
	return nil
}

// The base names of rank 0's metrics log and plot under the run directory.
const metricsName, plotName = "metrics.jsonl", "curves.png"

// removeStaleTemps removes the temporaries of the files this rank writes under the run
// directory (its timeline; rank 0's metrics log, plot and merged timeline) that a process
// killed mid-write left (checkpoint.RemoveTemps): this rank is their one writer, and it has
// not begun writing them yet. One that stays is logged, never an error: it is a side
// output's.
func (r *run) removeStaleTemps() {
	names := []string{timelineName(r.rank)}
	if r.rank == 0 {
		names = append(names, metricsName, plotName, mergedTimelineName)
	}
	for _, n := range names {
		if _, err := checkpoint.RemoveTemps(r.cfg.Out, n); err != nil {
			r.log.Warn("could not remove a stale temporary", "err", err)
		}
	}
}

// close releases the engine, if one was built; a failure to release is logged, since the
// run's own result (or error) is what the caller needs.
func (r *run) close() {
	if r.eng == nil {
		return
	}
	if err := r.eng.close(); err != nil {
		r.log.Warn("releasing the training engine", "err", err)
	}
	r.eng = nil
}

// closeOutputs closes what openOutputs opened.
func (r *run) closeOutputs() {
	if r.side != nil {
		r.side.waitPlot() // a run that failed may leave a drawing running
	}
	if r.side != nil && r.side.m != nil {
		if err := r.side.m.Close(); err != nil {
			r.side.warn("metrics log", r.side.m.path, err)
		}
	}
}

// trainAll runs the epochs, then the end of the run.
func (r *run) trainAll(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	accum := ""
	if cfg.GradAccum > 1 {
		accum = fmt.Sprintf(" x %d accumulated", cfg.GradAccum)
	}
	optName := cfg.Optimizer
	if cfg.Solver != nil {
		optName = fmt.Sprintf("%T", cfg.Solver)
	}
	first := Step{Rank: r.rank, Epoch: int(r.step) / r.perEpoch, Step: r.step, LR: r.opt.LR()}
	if err := stepHook(ctx, cfg.callbacks, func(c Callback) func(context.Context, Step) error { return c.OnTrainStart }, first); err != nil {
		return nil, err
	}
	fmt.Fprintf(r.out, "train: %s, %d parameters, %d ranks x batch %d%s, %d steps/epoch, %s lr %.4g, %s schedule, image %dx%d, %d classes\n",
		r.spec.name, r.model.Params.NumParams(), r.world, r.local, accum, r.perEpoch, optName, cfg.LR, cfg.Sched, r.shape[2], r.shape[1], cfg.NumClasses)
	r.bar = newProgress(r.out, cfg.Progress, cfg.Quiet || r.rank != 0)
	defer r.bar.close()
	r.start = time.Now()
	for epoch := int(r.step) / r.perEpoch; epoch < cfg.Epochs && !r.reachedMax(); epoch++ {
		complete, err := r.epoch(ctx, epoch)
		if err != nil {
			return nil, err
		}
		r.res.Epochs = epoch + 1
		if !complete {
			break // a partial epoch (-max-steps): no evaluation
		}
		if err := r.validate(ctx, epoch); err != nil {
			return nil, err
		}
		if r.reachedMax() {
			break
		}
	}
	return r.finish(ctx)
}

// reachedMax reports whether -max-steps is reached.
func (r *run) reachedMax() bool { return r.cfg.MaxSteps > 0 && r.step >= int64(r.cfg.MaxSteps) }

// epoch runs the optimizer steps of epoch that are left, and reports whether the epoch is
// complete (a run stopped by -max-steps ends inside one).
func (r *run) epoch(ctx context.Context, epoch int) (complete bool, err error) {
	cfg := r.cfg
	skip := int(r.step) - epoch*r.perEpoch // optimizer steps of this epoch done before a resume
	r.bar.start(epoch, cfg.Epochs, r.perEpoch, skip)
	defer r.bar.finish()
	var epochLoss, stepLoss float64
	var n, k int // optimizer steps of this epoch in this run; batches of the current step
	for batch, err := range r.train.Batches(ctx, epoch, skip*cfg.GradAccum) {
		if err != nil {
			return false, err
		}
		if n+skip == r.perEpoch {
			break // the leftover batches of a -grad-accum-steps epoch
		}
		if batch.N != r.local {
			return false, fmt.Errorf("trainer: rank %d: batch of %d images, want %d (a skipped bad file?)", r.rank, batch.N, r.local)
		}
		k++
		at := micro{pos: r.step*int64(cfg.GradAccum) + int64(k-1), last: k == cfg.GradAccum}
		lv, err := r.eng.trainStep(ctx, batch, at)
		if err != nil {
			return false, err
		}
		stepLoss += float64(lv)
		if !at.last {
			continue
		}
		loss := float64(float32(stepLoss / float64(cfg.GradAccum))) // the loss as float32, as the program gives it
		stepLoss, k = 0, 0
		if err := r.update(ctx, epoch, loss); err != nil {
			return false, err
		}
		epochLoss += loss
		n++
		r.res.LossHistory = keepLast(append(r.res.LossHistory, loss), LossHistorySteps)
		if err := r.afterStep(ctx, epoch, n+skip, epochLoss/float64(n), loss); err != nil {
			return false, err
		}
		if r.reachedMax() {
			break
		}
	}
	if n > 0 {
		// The epoch's loss as the console and the summary show it: the mean over ranks,
		// as metrics.jsonl has it.
		r.lossBuf[0] = epochLoss / float64(n)
		if err := r.g.AllReduce(comm.F64(r.lossBuf[:1]), comm.Avg).Wait(ctx); err != nil {
			return false, fmt.Errorf("trainer: epoch %d loss all-reduce: %w", epoch+1, err)
		}
		r.res.FinalLoss = r.lossBuf[0]
	}
	return n+skip == r.perEpoch, nil
}

// update ends an optimizer step whose forward and backward gave loss: the callbacks'
// BeforeUpdate, the engine's update, the weights' average, the schedule.
func (r *run) update(ctx context.Context, epoch int, loss float64) error {
	at := Step{Rank: r.rank, Epoch: epoch, Step: r.step + 1, Loss: loss, LR: r.opt.LR()}
	if err := stepHook(ctx, r.cfg.callbacks, func(c Callback) func(context.Context, Step) error { return c.BeforeUpdate }, at); err != nil {
		return err
	}
	if err := r.eng.update(ctx); err != nil {
		return fmt.Errorf("trainer: step %d: %w", r.step+1, err)
	}
	if r.ema != nil {
		r.ema.update()
	}
	r.sched.Step()
	r.step++
	r.imagesSeen += r.local * r.world * r.cfg.GradAccum
	return nil
}

// afterStep logs the step just taken (every print-freq steps, at the epoch's end and at
// the last step), checkpoints it (every WithCheckpoints steps) and runs the callbacks'
// OnStepEnd. done is the epoch's steps so far, mean its
// mean loss on this rank, loss this step's.
func (r *run) afterStep(ctx context.Context, epoch, done int, mean, loss float64) error {
	step := r.step
	if step%int64(r.cfg.PrintFreq) == 0 || done == r.perEpoch || r.reachedMax() {
		// The logged loss is the mean over ranks: one tiny all-reduce every print-freq steps.
		r.lossBuf[0], r.lossBuf[1] = mean, loss
		if err := r.g.AllReduce(comm.F64(r.lossBuf), comm.Avg).Wait(ctx); err != nil {
			return fmt.Errorf("trainer: step %d loss all-reduce: %w", step, err)
		}
		ips := float64(r.imagesSeen) / time.Since(r.start).Seconds()
		r.bar.update(done, step, r.lossBuf[0], r.opt.LR(), ips)
		r.side.add(Record{Kind: "train", Epoch: epoch, Step: step, Loss: r.lossBuf[0], StepLoss: r.lossBuf[1], LR: r.opt.LR(),
			ImgsPerS: ips, ElapsedS: time.Since(r.start).Seconds(), LossScale: lossScaleOf(r.eng)})
	}
	if r.cfg.CkptEvery > 0 && step%int64(r.cfg.CkptEvery) == 0 {
		if err := r.save(ctx, step, epoch); err != nil {
			return err
		}
	}
	at := Step{Rank: r.rank, Epoch: epoch, Step: step, Loss: loss, LR: r.opt.LR()}
	return stepHook(ctx, r.cfg.callbacks, func(c Callback) func(context.Context, Step) error { return c.OnStepEnd }, at)
}

// validate ends a complete epoch: validation (and of the weights' average), its records,
// the epoch's checkpoint, the plot and the callbacks' OnEpochEnd. Without a validation
// split the epoch ends with its checkpoint.
func (r *run) validate(ctx context.Context, epoch int) error {
	cfg := r.cfg
	ep := Epoch{Rank: r.rank, Epoch: epoch, Step: r.step, TrainLoss: r.res.FinalLoss}
	if r.val == nil {
		fmt.Fprintf(r.out, "epoch %d/%d  train loss %.4f  %.0f img/s\n",
			epoch+1, cfg.Epochs, r.res.FinalLoss, float64(r.imagesSeen)/time.Since(r.start).Seconds())
		return r.endEpoch(ctx, epoch, ep)
	}
	vloss, top1, top5, err := r.evaluate(ctx, false)
	if err != nil {
		return err
	}
	r.res.Top1, r.res.Top5, r.res.Evaluated = top1, top5, true
	ep.Evaluated, ep.ValLoss, ep.Top1, ep.Top5 = true, vloss, top1, top5
	fmt.Fprintf(r.out, "epoch %d/%d  train loss %.4f  val loss %.4f  top-1 %.2f%%  top-5 %.2f%%  %.0f img/s\n",
		epoch+1, cfg.Epochs, r.res.FinalLoss, vloss, top1, top5, float64(r.imagesSeen)/time.Since(r.start).Seconds())
	// The validation record goes before the checkpoint: a crash between the two leaves a
	// record that the resumed run drops and writes again, never a missing one.
	r.side.add(Record{Kind: "val", Epoch: epoch, Step: r.step, Loss: vloss, Top1: top1, Top5: top5, ElapsedS: time.Since(r.start).Seconds()})
	if cfg.ModelEMA {
		eloss, etop1, etop5, err := r.evaluate(ctx, true)
		if err != nil {
			return err
		}
		r.res.EMATop1, r.res.EMATop5 = etop1, etop5
		fmt.Fprintf(r.out, "epoch %d/%d  EMA of the weights: val loss %.4f  top-1 %.2f%%  top-5 %.2f%%\n", epoch+1, cfg.Epochs, eloss, etop1, etop5)
		r.side.add(Record{Kind: "val_ema", Epoch: epoch, Step: r.step, Loss: eloss, Top1: etop1, Top5: etop5, ElapsedS: time.Since(r.start).Seconds()})
	}
	return r.endEpoch(ctx, epoch, ep)
}

// endEpoch writes the epoch's checkpoint, starts its plot (drawn in the background: sideOutputs.plotAsync)
// and runs the callbacks' OnEpochEnd.
func (r *run) endEpoch(ctx context.Context, epoch int, ep Epoch) error {
	if err := r.save(ctx, r.step, epoch+1); err != nil {
		return err
	}
	if p := r.side.plotAsync(); p != "" {
		r.res.PlotPath = p
	}
	ep.Checkpoint = r.res.Checkpoint
	for _, cb := range r.cfg.callbacks {
		if cb.OnEpochEnd != nil {
			if err := cb.OnEpochEnd(ctx, ep); err != nil {
				return fmt.Errorf("trainer: callback at the end of epoch %d: %w", epoch+1, err)
			}
		}
	}
	return nil
}

// finish ends the run: a checkpoint of its last step (when the last epoch did not write
// one), the strategy's report, the plot and the summary.
func (r *run) finish(ctx context.Context) (*Result, error) {
	res := r.res
	res.Steps = r.step
	if n := len(res.LossHistory); n > LossHistorySteps {
		res.LossHistory = append([]float64(nil), res.LossHistory[n-LossHistorySteps:]...)
	}
	res.ImgsPerS = float64(r.imagesSeen) / time.Since(r.start).Seconds()
	if r.step > r.firstStep && r.step != r.saved {
		// A run that stopped between checkpoints (-max-steps) ends with one, so that a later
		// run resumes where this one stopped.
		if err := r.save(ctx, r.step, int(r.step)/r.perEpoch); err != nil {
			return nil, err
		}
	}
	if err := r.eng.report(ctx, r.cfg, res); err != nil {
		return nil, err
	}
	if !r.side.waitPlot() {
		res.PlotPath = ""
	}
	if res.PlotPath == "" && r.step > 0 {
		// A run that ended before its first validation still plots its training curves.
		res.PlotPath = r.side.plot()
	}
	if res.ModelStateBytes == 0 { // replicated: the fraction of all-reduce hidden behind backward
		r.side.scalar("train/overlap", r.step, res.OverlapFrac)
	}
	if err := finishReport(ctx, r.g, r.cfg, res, r.out); err != nil {
		return nil, err
	}
	r.cfg.writeDeviceProfile(r.out, r.log)
	for _, cb := range r.cfg.callbacks {
		if cb.OnTrainEnd != nil {
			if err := cb.OnTrainEnd(ctx, res); err != nil {
				return nil, fmt.Errorf("trainer: callback at the end of training: %w", err)
			}
		}
	}
	return res, nil
}
