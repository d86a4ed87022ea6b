// Package clustertest holds the tests that start workers with the launchers clusters use,
// OpenMPI's mpirun and SLURM's srun (on a one-node cluster the test starts and stops), and
// check that comm.InitFromEnv builds the group from their environment. It has no API.
package clustertest
