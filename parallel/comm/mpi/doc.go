// Package mpi is the MPI backend of the process group: a comm.Group whose collectives are
// OpenMPI's nonblocking ones, for clusters reached through MPI (InfiniBand, Omni-Path) and
// jobs started by mpirun. It lives apart from comm so that comm stays free of cgo.
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
// All-reduces from 4 MiB run the package's ring over MPI messages, which was 4-8x faster
// than MPI_Iallreduce here (Note [Ring over MPI messages]; WithRingBytes, RingBytesEnv);
// the other collectives are OpenMPI's. Both give every rank the same bits, run after run,
// for a fixed world and size (the tests check it at world 2 and 3); sums may differ from
// comm's transports in the last bits.
//
// Differences from comm's transports, forced by MPI: a collective or send that times out, or
// whose Wait context ends, and comm.Abort, end the whole job through MPI_Abort (Note
// [Failures end the job]); a rank that dies makes mpirun kill the others; ranks that issue
// different collectives are not detected (ErrMismatch) and may hang until the timeout; a
// peer that closed is not noticed by a Recv waiting for it. The last Close of the process
// calls MPI_Finalize, after which MPI cannot start again in that process.
package mpi
