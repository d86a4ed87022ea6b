package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// BackendEnv names the environment variable that chooses the backend InitFromEnv and
// InitFromConfig build: "tcp" or "shm" (this package's transports, as GP_COMM_TRANSPORT;
// an explicit WithTransport wins), "auto" or unset (a registered backend that asks for this
// job, see Backend.Auto, else this package's transports), or the name of a backend
// registered with RegisterBackend ("mpi" in a program that imports parallel/comm/mpi). A name
// that nothing registered is an error naming the backends linked into the program.
const BackendEnv = "GP_COMM_BACKEND"

// BackendConfig is what InitFromConfig hands a registered backend: the process's place in the
// job and the settings resolved from the environment (TimeoutEnv, WarnAfterEnv,
// RendezvousTimeoutEnv) and the options.
type BackendConfig struct {
	Env            launchenv.Env
	Timeout        time.Duration // one operation's bound (WithTimeout)
	WarnAfter      time.Duration // when a waiting collective logs a warning; 0: never
	ConnectTimeout time.Duration // the bound on joining the job (WithConnectTimeout)
	CloseTimeout   time.Duration // the bound on Close's wait for the peers (WithCloseTimeout)
	Logger         *slog.Logger
	Debug          bool // log every operation (WithDebug, GP_COMM_DEBUG=1)
}

// Backend is a process-group implementation that lives in another package, so that this one
// stays free of its dependencies (cgo, a C library loaded at run time): the package registers
// it with RegisterBackend, and a program links it in with a blank import, as database/sql
// drivers are.
type Backend struct {
	// New builds this rank's group; it must honour ctx and cfg.ConnectTimeout while joining.
	New func(ctx context.Context, cfg BackendConfig) (Group, error)
	// Auto, when not nil, reports whether InitFromConfig should choose this backend for env
	// when BackendEnv is unset or "auto" (the MPI backend: under mpirun, when libmpi loads).
	// Every rank of a job must answer alike.
	Auto func(env launchenv.Env) bool
}

var (
	backendsMu sync.RWMutex
	backends   = map[string]Backend{}
)

// builtinBackends are the names BackendEnv takes without registration.
var builtinBackends = []string{"auto", "shm", "tcp"}

// RegisterBackend makes b available under name (lower case, as BackendEnv spells it). It
// fails for an empty name, one of the built-in names (auto, shm, tcp), a nil New or a name
// already registered. Backend packages call it from their init function.
func RegisterBackend(name string, b Backend) error {
	if name == "" || name != strings.ToLower(name) || slices.Contains(builtinBackends, name) || b.New == nil {
		return fmt.Errorf("comm: register backend %q: %w: want a new lower-case name other than %v, and New", name, ErrInvalid, builtinBackends)
	}
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, ok := backends[name]; ok {
		return fmt.Errorf("comm: register backend %q: %w: already registered", name, ErrInvalid)
	}
	backends[name] = b
	return nil
}

// Backends lists the names BackendEnv accepts in this program, sorted: the built-in ones and
// the registered ones.
func Backends() []string {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	out := slices.Clone(builtinBackends)
	for n := range backends {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// chooseBackend returns the registered backend BackendEnv (or, when unset, Backend.Auto) asks
// for, with its name, or ok false for this package's transports (setting *transport to the
// built-in name asked for when WithTransport did not choose one).
func chooseBackend(env launchenv.Env, transport *string) (name string, b Backend, ok bool, err error) {
	name = strings.ToLower(strings.TrimSpace(os.Getenv(BackendEnv)))
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	switch name {
	case "tcp", "shm":
		if *transport == "" {
			*transport = name
		}
		return name, Backend{}, false, nil
	case "", "auto":
		names := make([]string, 0, len(backends))
		for n := range backends {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if b := backends[n]; b.Auto != nil && b.Auto(env) {
				return n, b, true, nil
			}
		}
		return "", Backend{}, false, nil
	}
	if b, found := backends[name]; found {
		return name, b, true, nil
	}
	hint := ""
	if name == "mpi" || name == "nccl" {
		hint = fmt.Sprintf(" (import _ \"github.com/gorgonia-parallel/gp/parallel/comm/%s\" to link it in)", name)
	}
	return "", Backend{}, false, fmt.Errorf("%w: %s=%q: no such backend in this program%s; have %v",
		ErrInvalid, BackendEnv, name, hint, Backends())
}

// initBackend builds the group of the registered backend b.
func initBackend(ctx context.Context, name string, b Backend, env launchenv.Env, cfg config) (Group, error) {
	g, err := b.New(ctx, BackendConfig{Env: env, Timeout: cfg.timeout, WarnAfter: cfg.warnAfter,
		ConnectTimeout: cfg.connectTimeout, CloseTimeout: cfg.closeTimeout, Logger: cfg.logger, Debug: cfg.debug})
	if err != nil {
		return nil, fmt.Errorf("rank %d: backend %s (%s): %w", env.Rank, name, BackendEnv, err)
	}
	if g == nil {
		return nil, fmt.Errorf("rank %d: backend %s: %w", env.Rank, name, errors.New("New returned no group and no error"))
	}
	return g, nil
}
