package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/auth"
)

// ErrTimeout is wrapped by the error of a Get whose key was not set within the store's
// timeout, and of a call whose context's deadline passed.
var ErrTimeout = errors.New("store: timeout")

// Option configures a Store, a Server or a Rendezvous.
type Option func(*config)

type config struct {
	secret      *string
	timeout     time.Duration
	joinTimeout time.Duration
	logger      *slog.Logger
}

func newConfig(opts []Option) config {
	c := config{timeout: 30 * time.Minute, joinTimeout: 5 * time.Minute}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return c
}

// WithSecret sets the secret clients present to the server (default: auth.SecretEnv, see
// auth.Secret). The server and its clients must use the same one.
func WithSecret(s string) Option { return func(c *config) { c.secret = &s } }

// WithTimeout sets how long a Get waits for its key when its context has no earlier
// deadline (default 30 minutes).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithJoinTimeout bounds a Rendezvous: reaching the master and joining (default 5 minutes).
func WithJoinTimeout(d time.Duration) Option { return func(c *config) { c.joinTimeout = d } }

// WithLogger sets the logger of a Server's refused and dropped connections (default: text to
// stderr).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

func (c *config) secretValue() string {
	if c.secret != nil {
		return *c.secret
	}
	return auth.Secret()
}

// ctxErr is ctx's error, wrapping ErrTimeout when its deadline passed.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
	return ctx.Err()
}
