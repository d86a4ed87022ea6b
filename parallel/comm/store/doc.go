// Package store is the job's rendezvous: a key-value store that rank 0 hosts ([Server],
// [Listen]) and every rank reaches over TCP ([Store], [Dial]), the role of torch's TCPStore.
// [Rendezvous] starts it from a launcher's environment and registers each rank, refusing a
// duplicate rank or a world size that differs from rank 0's.
//
// The process group (parallel/comm) exchanges its transports' addresses and shared-memory
// names through it; the NCCL backend its unique id; the c10d rendezvous of gprun its rounds.
// Connections are authenticated with the job's secret (package auth); a value is at most
// MaxValue bytes. Get waits for a key that another rank has not set yet, up to the store's
// timeout (WithTimeout) or its context's deadline.
package store
