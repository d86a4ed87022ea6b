//go:build !linux

package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/gorgonia-parallel/gp/parallel/comm/store"
)

const (
	shmDir        = "/dev/shm"
	shmFilePrefix = "gp-comm-"
)

var errNoSHM = errors.New("shared-memory transport: only on Linux")

// NewSHMGroup needs Linux (rings in /dev/shm, named pipes as bells); elsewhere it fails.
func NewSHMGroup(ctx context.Context, st *store.Store, rank, size int, opts ...Option) (Group, error) {
	return nil, fmt.Errorf("rank %d: %w", rank, errNoSHM)
}

func dialSHM(ctx context.Context, st *store.Store, rank, size int, cfg config, required bool) (Transport, error) {
	if required && size > 1 {
		return nil, errNoSHM
	}
	return dialTCP(ctx, st, rank, size, cfg)
}

func dialLocalSHM(ctx context.Context, st *store.Store, ns string, rank, size int, cfg config) (Transport, error, error) {
	return nil, errNoSHM, nil
}
