// Package trainer trains classification models with every strategy and device of the
// module: checkpoints with automatic resume, evaluation, metrics, progress and the rest of
// what a training script needs, configured by functional options.
//
// # Use
//
// A Trainer is made once from options and trains a Model on a Source:
//
//	t, err := trainer.New(
//		trainer.WithEpochs(10), trainer.WithBatchSize(256),
//		trainer.WithOptimizer(trainer.SGD(0.1, 0.9)), trainer.WithWeightDecay(1e-4),
//		trainer.WithSchedule(trainer.Schedule{Name: "cosine", WarmupEpochs: 1}),
//		trainer.WithStrategy("ddp"), trainer.WithDevice("cpu"), trainer.WithDir("runs/mine"))
//	res, err := t.Fit(ctx, trainer.Module(myModule), trainer.DatasetSource{Train: train, Val: val, Classes: 10})
//
// As Lightning's Trainer.fit, the same program runs on one process or on each rank of a
// job that gprun (or torchrun, or mpirun) launches: Fit joins the group the environment
// describes. Joining a job of several ranks itself (without WithGroup), Fit first lowers the
// Go runtime's monitor thread (parallel/sysmon's Lower), as the main of a program that joins
// with comm.InitFromEnv does: the process's set-up belongs to whoever joins the job, and
// without WithGroup that is Fit. With WithGroup the program joined and set up the process
// itself, and Fit leaves its threads alone. The model is any of
//   - Module: an nn.Module (models.New's ResNets and Swins, or a module of one's own);
//   - Arch: an architecture of the models package by name, sized to the data's classes;
//   - ModuleFor: a module made once the data's number of classes is known;
//   - Graph: a plain gorgonia forward function (G.Conv2d, G.MaxPool2D, G.Mul, ...) whose
//     weights are adopted with nn.Builder.Learnable.
//
// The data is a DatasetSource (map-style data.Datasets with a sampler: by default
// PyTorch's DistributedSampler), a BatchSource (a function that makes each rank's batch i
// of an epoch) or any Source. The optimizer is optim's SGD or AdamW, any optim.Optimizer
// (CustomOptimizer), or a gorgonia solver (Solver), whose state optim/gsolver checkpoints.
//
// # What Fit gives
//
//   - Strategies (WithStrategy): ddp (DistributedDataParallel, the default, also at world
//     size 1), none, dp (DataParallel over replicas in one process) and zero3 (ZeRO-3,
//     with WithOffload); devices (WithDevice): cpu, cuda, cuda:N. One table maps each
//     strategy and device to its engine; every engine runs the same train.Program step.
//   - Checkpoints (WithDir, WithCheckpoints, WithResume): one per epoch and every N steps,
//     the newest K kept; a run resumes from the newest one that loads completely, and
//     redoes the steps after it bit for bit as an uninterrupted run would (Note [Exact
//     resume]); one with the other strategy's layout, or of another model, is refused with
//     an error naming it, and nothing saved is removed.
//   - Evaluation after each epoch: the loss and top-1 and top-5 accuracy over all ranks.
//   - Side outputs on rank 0: DIR/metrics.jsonl (a record every print-freq steps and per
//     validation), TensorBoard events (WithTensorBoard), DIR/curves.png, per-rank
//     timelines (WithTimelines). A side output that fails is one warning, never the end of
//     training.
//   - Progress (WithProgress): a bar on a terminal, also on the terminal of the gprun that
//     launched the job (launch.ProgressTTYEnv), lines every print-freq steps elsewhere; a
//     summary at the end (steps, images/s, accuracy, overlap or ZeRO-3 state, peak memory
//     per rank, the files written).
//   - Autocast with a GradScaler (WithAutocast), gradient clipping (WithClipGrad),
//     accumulation (WithGradAccum), an average of the weights (WithEMA), learning-rate
//     schedules with warmup (WithSchedule), label smoothing and mixup/cutmix, a step limit
//     (WithMaxSteps).
//   - Fail-fast: a rank whose run fails aborts the group with its error, so that the other
//     ranks stop at once naming it.
//   - Callbacks (WithCallback): functions run at the start of training, before each
//     optimizer update, after each step and epoch and at the end, on every rank.
//
// # The command-line layer
//
// examples/imagenet is a command over a Trainer: the flags of PyTorch's
// examples/imagenet/main.py (and timm's augmentation flags), each architecture's recipe,
// and its image data sets (imagefolder, synthetic, npy, webdataset, fashion-mnist).
package trainer
