// Package simdtest runs a test at every SIMD level of package simd, so that one machine
// proves each kernel it can run against the Go code.
package simdtest

import (
	"testing"

	"github.com/gorgonia-parallel/gp/internal/simd"
)

// Each runs f as a subtest named after each level (off, avx2, avx512), with that level
// active for the whole process while f runs, and restores the level after. A level this CPU
// or build cannot run is skipped with the reason (the CPU's features, or the build), and
// the parent test logs which levels ran and which were skipped. Tests that use Each must not
// call t.Parallel: the level is process-wide.
func Each(t *testing.T, f func(t *testing.T, l simd.Level)) {
	t.Helper()
	var ran, skipped []string
	for _, l := range simd.All {
		if err := simd.Supported(l); err != nil {
			skipped = append(skipped, l.String()+" ("+err.Error()+")")
			t.Run(l.String(), func(t *testing.T) { t.Skip(err.Error()) })
			continue
		}
		ran = append(ran, l.String())
		t.Run(l.String(), func(t *testing.T) {
			restore, err := simd.Set(l)
			if err != nil {
				t.Fatal(err)
			}
			defer restore()
			f(t, l)
		})
	}
	t.Logf("SIMD levels run: %v; skipped: %v", ran, skipped)
}
