package comm

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// shmBells are how the ranks of a shared-memory transport wake each other. Every rank owns
// a bell, a named pipe next to its ring file that it reads through the netpoller; a peer
// wakes one of the rank's waits by writing that wait's id (4 bytes, one atomic pipe write)
// into the bell. A goroutine reads the bell and hands each id to the channel of the wait it
// names, on which the sleeping goroutine is parked without holding a P (see wait).
//
// Wait ids of a rank, world size n and k streams: the consumer word (cwait) of the ring from
// peer p on stream s is p*k+s, the producer word (pwait) of the ring to peer p on stream s
// is n*k+p*k+s, and the staging word is 2*n*k.
type shmBells struct {
	name    string          // this rank's bell (unlinked with the ring file)
	in      *os.File        // this rank's bell, read end (opened read-write: never EOF)
	out     []int           // [peer]: write ends of the peers' bells (-1: none)
	waiters []chan struct{} // by wait id
	closed  atomic.Bool
	done    sync.WaitGroup // the reader
}

func ringWaitID(k, peer, s int) int        { return peer*k + s }
func producerWaitID(n, k, peer, s int) int { return n*k + peer*k + s }
func stageWaitID(n, k int) int             { return 2 * n * k }

// createBell makes this rank's bell at name and opens it for reading; its reader starts
// with start.
func (b *shmBells) create(name string, n, k int) error {
	if err := syscall.Mkfifo(name, 0o600); err != nil {
		return fmt.Errorf("creating the bell %s: %w", name, err)
	}
	b.name = name
	// Read-write, so that the pipe never reports end of file while no peer has it open;
	// non-blocking, so that os.NewFile reads it through the netpoller.
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Unlink(name)
		return fmt.Errorf("opening the bell %s: %w", name, err)
	}
	b.in = os.NewFile(uintptr(fd), name)
	b.waiters = make([]chan struct{}, 2*n*k+1)
	for i := range b.waiters {
		b.waiters[i] = make(chan struct{}, 1)
	}
	b.out = make([]int, n)
	for i := range b.out {
		b.out[i] = -1
	}
	b.done.Add(1)
	go b.read()
	return nil
}

// open opens peer's bell, at name, for writing.
func (b *shmBells) open(peer int, name string) error {
	fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening rank %d's bell %s: %w", peer, name, err)
	}
	b.out[peer] = fd
	return nil
}

// read hands the ids written into the bell to their waits until the bell is closed.
func (b *shmBells) read() {
	defer b.done.Done()
	buf := make([]byte, 4096) // a multiple of 4: reads never split an id
	for {
		n, err := b.in.Read(buf)
		if err != nil {
			return
		}
		for i := 0; i+4 <= n; i += 4 {
			id := int(binary.LittleEndian.Uint32(buf[i:]))
			if id < len(b.waiters) {
				select {
				case b.waiters[id] <- struct{}{}:
				default: // already rung
				}
			}
		}
	}
}

// ring writes id into peer's bell. A full pipe drops the ring: the wait then ends at its
// bounded sleep.
func (b *shmBells) ring(peer, id int) {
	if b.closed.Load() || b.out[peer] < 0 {
		return
	}
	var m [4]byte
	binary.LittleEndian.PutUint32(m[:], uint32(id))
	syscall.Write(b.out[peer], m[:])
}

// unlink removes the bell's name (the open ends live on).
func (b *shmBells) unlink() {
	if b.name != "" {
		syscall.Unlink(b.name)
		b.name = ""
	}
}

// close closes every end and waits for the reader to stop.
func (b *shmBells) close() {
	if b.closed.Swap(true) {
		return
	}
	b.unlink()
	for i, fd := range b.out {
		if fd >= 0 {
			syscall.Close(fd)
			b.out[i] = -1
		}
	}
	if b.in != nil {
		b.in.Close()
		b.done.Wait()
	}
}
