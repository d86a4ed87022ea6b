package comm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/parallel/comm/launchenv"
)

// A registered backend is built by InitFromConfig when GP_COMM_BACKEND names it, or by
// itself when its Auto says so; an unknown name fails naming the backends linked in; bad
// registrations fail.
func TestRegisterBackend(t *testing.T) {
	var got BackendConfig
	fake := Backend{
		New: func(_ context.Context, cfg BackendConfig) (Group, error) {
			got = cfg
			return NewLocalGroups(1)[0], nil
		},
		Auto: func(env launchenv.Env) bool { return env.Launcher == "fake-launcher" },
	}
	if err := RegisterBackend("fake-test", fake); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		backendsMu.Lock()
		delete(backends, "fake-test")
		backendsMu.Unlock()
	})
	for _, bad := range []struct {
		name string
		b    Backend
	}{{"fake-test", fake}, {"", fake}, {"tcp", fake}, {"Upper", fake}, {"nonew", Backend{}}} {
		if err := RegisterBackend(bad.name, bad.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("RegisterBackend(%q): %v, want ErrInvalid", bad.name, err)
		}
	}
	if b := Backends(); !slices.Contains(b, "fake-test") || !slices.Contains(b, "tcp") {
		t.Errorf("Backends() = %v", b)
	}
	ctx := context.Background()
	env := launchenv.Env{Rank: 0, WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 1}

	t.Setenv(BackendEnv, "fake-test")
	g, err := InitFromConfig(ctx, env, WithTimeout(7e9))
	if err != nil {
		t.Fatal(err)
	}
	g.Close(ctx)
	if got.Timeout != 7e9 || got.Env != env {
		t.Errorf("the backend got %+v, want the timeout and env passed", got)
	}

	t.Setenv(BackendEnv, "")
	got = BackendConfig{}
	auto := env
	auto.Launcher = "fake-launcher"
	if g, err = InitFromConfig(ctx, auto); err != nil {
		t.Fatal(err)
	}
	g.Close(ctx)
	if got.Env != auto {
		t.Errorf("Auto did not choose the backend: it got %+v", got)
	}

	t.Setenv(BackendEnv, "mpi")
	_, err = InitFromConfig(ctx, env)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "parallel/comm/mpi") || !strings.Contains(err.Error(), "fake-test") {
		t.Errorf("unknown backend: %v, want ErrInvalid with the import to add and the backends linked in", err)
	}
}
