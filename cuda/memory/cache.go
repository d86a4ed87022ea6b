// Package memory is the caching allocator of device memory and pinned host memory: freed
// blocks are kept in per-size free lists and handed out again, so a training loop stops
// calling cuMemAlloc/cuMemFree (which synchronise the device) after its first step, as
// PyTorch's CUDACachingAllocator does.
//
// Sizes are rounded up to a size class (multiples of 512 bytes below 1 MiB, then four classes
// per power of two, at most 25% waste) and a block is reused only for its own class. When the
// backend is out of memory the cache frees every cached block and retries once.
//
// Reuse is stream-ordered: a block freed while a kernel on the device's stream still reads it
// may be handed to the next allocation, which is safe because that allocation's kernels run
// after it on the same stream. Callers that use other streams record an event first.
package memory

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// Backend allocates and frees raw memory: cuMemAlloc/cuMemFree, or cuMemHostAlloc/
// cuMemFreeHost for pinned host memory.
type Backend interface {
	// Alloc returns the address of bytes of memory.
	Alloc(bytes int) (uintptr, error)
	// Free releases memory from Alloc.
	Free(p uintptr) error
}

// Block is an allocation: its address and its (rounded) size.
type Block struct {
	// Ptr is the address.
	Ptr uintptr
	// Size is the usable size in bytes (the size class, >= the requested size).
	Size int
}

// Stats counts the cache's use.
type Stats struct {
	// InUse is the bytes of blocks handed out and not freed.
	InUse int64
	// Reserved is InUse plus the bytes kept in the free lists.
	Reserved int64
	// PeakInUse is the largest InUse seen.
	PeakInUse int64
	// Hits and Misses count allocations served from the cache and from the backend.
	Hits, Misses int64
	// Retries counts out-of-memory failures retried after emptying the cache.
	Retries int64
}

// ErrDoubleFree is returned by Free for a block the cache did not hand out.
var ErrDoubleFree = errors.New("memory: free of a block that is not allocated")

// Cache is a caching allocator over a Backend. It is safe for concurrent use.
type Cache struct {
	name    string
	backend Backend
	mu      sync.Mutex
	free    map[int][]uintptr
	live    map[uintptr]int
	stats   Stats
}

// Option configures a Cache.
type Option func(*Cache)

// WithName names the cache in errors ("cuda:0", "pinned").
func WithName(name string) Option { return func(c *Cache) { c.name = name } }

// New makes a cache over b.
func New(b Backend, opts ...Option) *Cache {
	c := &Cache{name: "memory", backend: b, free: map[int][]uintptr{}, live: map[uintptr]int{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// SizeClass is the size a request of n bytes is rounded up to.
func SizeClass(n int) int {
	if n <= 0 {
		return 512
	}
	if n < 1<<20 {
		return (n + 511) &^ 511
	}
	// Four classes per power of two: 1, 1.25, 1.5, 1.75 x 2^e.
	e := bits.Len(uint(n-1)) - 1 // 2^e < n <= 2^(e+1)
	step := 1 << (e - 2)
	return (n + step - 1) / step * step
}

// Alloc returns a block of at least n bytes.
func (c *Cache) Alloc(n int) (Block, error) {
	size := SizeClass(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.free[size]; len(l) > 0 {
		p := l[len(l)-1]
		c.free[size] = l[:len(l)-1]
		c.stats.Hits++
		return c.handOut(p, size), nil
	}
	p, err := c.backend.Alloc(size)
	if err != nil && c.stats.Reserved > c.stats.InUse {
		c.stats.Retries++
		if terr := c.trimLocked(); terr != nil {
			return Block{}, fmt.Errorf("%s: alloc %d bytes: %w; emptying the cache: %v", c.name, size, err, terr)
		}
		p, err = c.backend.Alloc(size)
	}
	if err != nil {
		return Block{}, fmt.Errorf("%s: alloc %d bytes (%d in use, %d reserved): %w", c.name, size, c.stats.InUse, c.stats.Reserved, err)
	}
	c.stats.Misses++
	c.stats.Reserved += int64(size)
	return c.handOut(p, size), nil
}

func (c *Cache) handOut(p uintptr, size int) Block {
	c.live[p] = size
	c.stats.InUse += int64(size)
	c.stats.PeakInUse = max(c.stats.PeakInUse, c.stats.InUse)
	return Block{Ptr: p, Size: size}
}

// Free returns b to the cache for reuse.
func (c *Cache) Free(b Block) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	size, ok := c.live[b.Ptr]
	if !ok {
		return fmt.Errorf("%s: %#x: %w", c.name, b.Ptr, ErrDoubleFree)
	}
	delete(c.live, b.Ptr)
	c.stats.InUse -= int64(size)
	c.free[size] = append(c.free[size], b.Ptr)
	return nil
}

// Trim releases every cached (free) block to the backend.
func (c *Cache) Trim() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trimLocked()
}

func (c *Cache) trimLocked() error {
	var errs []error
	for size, l := range c.free {
		for _, p := range l {
			if err := c.backend.Free(p); err != nil {
				errs = append(errs, err)
			}
			c.stats.Reserved -= int64(size)
		}
		delete(c.free, size)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: trim: %w", c.name, err)
	}
	return nil
}

// Close frees every block, cached or in use, to the backend; the cache is empty afterwards.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for p, size := range c.live {
		if err := c.backend.Free(p); err != nil {
			errs = append(errs, err)
		}
		c.stats.Reserved -= int64(size)
		c.stats.InUse -= int64(size)
		delete(c.live, p)
	}
	errs = append(errs, c.trimLocked())
	return errors.Join(errs...)
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ResetPeak sets PeakInUse to the bytes in use now, so that the next Stats reports the peak
// since this call (torch.cuda.reset_peak_memory_stats).
func (c *Cache) ResetPeak() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.PeakInUse = c.stats.InUse
}
