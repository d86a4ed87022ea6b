//go:build !linux

package netbed

import (
	"context"
	"fmt"
)

// Create needs Linux network namespaces.
func Create(ctx context.Context, hosts int, link Link) (*Bed, error) {
	return nil, fmt.Errorf("%w: network namespaces are Linux only", ErrUnavailable)
}

// Close removes the bed.
func (b *Bed) Close() error { return nil }
