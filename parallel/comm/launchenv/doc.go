// Package launchenv is the worker's side of what a launcher (gprun, torchrun, SLURM's srun,
// OpenMPI's mpirun, a Kubeflow PyTorchJob) tells the processes it starts through their
// environment: each one's place in the job ([FromOS], [Launched]), a pipe that closes when
// the launcher dies ([WatchLauncher]) and a file in which a failing worker records why
// ([RecordFailure], read back by the launcher with [ReadFailureRecord]).
//
// It reads the environment and the descriptors it names; it connects nothing. The process
// group (parallel/comm) builds on it: comm.InitFromEnv calls FromOS and WatchLauncher, and
// comm.Abort records the failure.
package launchenv
