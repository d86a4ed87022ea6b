//go:build linux && race

package comm

import (
	"runtime"
	"unsafe"
)

// The race detector cannot see the synchronisation through shared memory: a frame this
// process sends reaches a peer, whose answer another goroutine of this process receives,
// and that goroutine may then write what the sender read. Every piece a producer publishes
// releases, and every piece a consumer takes acquires, one token of the transport, so the
// detector sees the happens-before edges the peers provide (and more: it may miss a race
// between two goroutines that both touch the rings).

func (t *shmTransport) raceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&t.raceToken)) }
func (t *shmTransport) raceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&t.raceToken)) }
