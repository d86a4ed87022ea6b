// Package mpi is the MPI backend of the process group: a comm.Group whose collectives run
// over OpenMPI (its nonblocking collectives, or rings over its messages), for clusters
// reached through MPI (InfiniBand, Omni-Path) and jobs started by mpirun. It lives apart
// from comm so that comm stays free of cgo.
//
// libmpi is loaded at run time (dlopen, like NCCL: see Load and LibraryEnv), so the package
// builds without MPI headers or libraries, and a build without cgo compiles and fails with
// ErrNoCgo. Only OpenMPI (libmpi.so.40: OpenMPI 3 to 5) is supported: its handles are
// pointers to exported objects, found with dlsym; MPICH's are integers from mpi.h.
//
// Importing the package registers the backend "mpi" with comm (comm.RegisterBackend), so
// that comm.InitFromEnv builds an MPI group when GP_COMM_BACKEND=mpi, and by default under
// mpirun (OMPI_COMM_WORLD_RANK set) when libmpi loads:
//
//	import _ "github.com/gorgonia-parallel/gp/parallel/comm/mpi"
//
//	mpirun -np 4 ./train          # MPI collectives
//	GP_COMM_BACKEND=tcp mpirun -np 4 ./train   # comm's own transports, ranks from mpirun
//
// New builds a group directly. Every MPI call runs on one OS thread (Note [One MPI thread]).
// Small collectives are OpenMPI's own (MPI_Iallreduce, MPI_Ireduce_scatter,
// MPI_Iallgather(v), MPI_Ibcast); large ones run the package's algorithms over MPI_Isend
// and MPI_Irecv where those were faster here (Note [Ring over MPI messages], Note [Ring
// thresholds]):
//
//	all-reduce       from 4 MiB    ring reduce-scatter, then ring all-gather
//	reduce-scatter   from 16 MiB   ring
//	all-gather       never         (the ring when WithRingBytes asks for it)
//	broadcast        never         (a pipelined chain when WithRingBytes asks for it)
//	barrier, send, recv            OpenMPI's
//
// WithRingBytes and RingBytesEnv set one threshold for all four (0: OpenMPI's at every
// size). Every rank ends with the same bits, run after run, for a fixed world, size and
// thresholds (the tests check it at world 2 and 3), and an all-reduce and a
// reduce-scatter that both run the ring give the same bits for each shard; sums may differ
// from comm's transports and between OpenMPI's and the package's algorithms in the last
// bits. Ranks that call a
// collective of the package's algorithms with different lengths, roots or collectives
// fail it with comm.ErrMismatch naming each rank's call.
//
// Differences from comm's transports, forced by MPI: a collective or send that times out, or
// whose Wait context ends, and comm.Abort, end the whole job through MPI_Abort (Note
// [Failures end the job]); a rank that dies makes mpirun kill the others; ranks that issue
// different collectives of OpenMPI's own, or one rank OpenMPI's and another the package's
// (thresholds that differ), are not detected (ErrMismatch) and may hang until the timeout; a
// peer that closed is not noticed by a Recv waiting for it. The last Close of the process
// calls MPI_Finalize, after which MPI cannot start again in that process.
package mpi
