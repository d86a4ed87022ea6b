//go:build !linux

package netbed

import (
	"context"
	"fmt"
	"net"
)

// Create needs Linux network namespaces.
func Create(ctx context.Context, hosts int, link Link) (*Bed, error) {
	return nil, fmt.Errorf("%w: network namespaces are Linux only", ErrUnavailable)
}

type holder struct{}

// Close removes the bed.
func (b *Bed) Close() error { return nil }

// SetLink needs Linux.
func (b *Bed) SetLink(ctx context.Context, i int, up bool) error { return ErrUnavailable }

// DeleteLink needs Linux.
func (b *Bed) DeleteLink(ctx context.Context, i int) error { return ErrUnavailable }

// Loss needs Linux.
func (b *Bed) Loss(ctx context.Context, i int, p float64) error { return ErrUnavailable }

// Dropped needs Linux.
func (b *Bed) Dropped(ctx context.Context, i int) (int64, error) { return 0, ErrUnavailable }

// Listen needs Linux.
func (b *Bed) Listen(i, port int) (net.Listener, error) { return nil, ErrUnavailable }

// Dial needs Linux.
func (b *Bed) Dial(ctx context.Context, i int, addr string) (net.Conn, error) {
	return nil, ErrUnavailable
}
