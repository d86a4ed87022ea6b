//go:build linux

package main

import (
	"slices"
	"testing"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// TestWithSeed checks that the recorded command replays the run's faults: the seed the clock
// chose is added, one the user gave is kept as given, and the caller's arguments stay as
// they were.
func TestWithSeed(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		seeded bool
		want   string
	}{
		{"clock seed", []string{"-minutes", "1"}, false, "go run ./bench/chaos -minutes 1 -seed 42"},
		{"no flags", nil, false, "go run ./bench/chaos -seed 42"},
		{"user seed", []string{"-seed=7", "-steps", "8"}, true, "go run ./bench/chaos -seed=7 -steps 8"},
	} {
		orig := slices.Clone(c.args)
		if got := benchutil.Command("chaos", withSeed(c.args, c.seeded, 42)); got != c.want {
			t.Errorf("%s: command %q, want %q", c.name, got, c.want)
		}
		if !slices.Equal(orig, c.args) {
			t.Errorf("%s: withSeed modified its arguments: %q", c.name, c.args)
		}
	}
}
