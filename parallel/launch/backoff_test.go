package launch

import (
	"testing"
	"time"
)

// The waits between restarts: doubling after quick failures, capped at 30 s (or at the
// first wait when that is longer), back to the first after an attempt of a minute or more.
func TestBackoff(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name  string
		first time.Duration
		ran   []time.Duration // each attempt's run time
		want  []time.Duration // the wait after each
	}{
		{"off", 0, []time.Duration{0, 0}, []time.Duration{0, 0}},
		{"doubling to the cap", s, []time.Duration{0, 0, 0, 0, 0, 0, 0}, []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s}},
		{"reset after a healthy attempt", s, []time.Duration{0, 0, 0, time.Minute, 59 * s}, []time.Duration{s, 2 * s, 4 * s, s, 2 * s}},
		{"first above the cap", 40 * s, []time.Duration{0, 0}, []time.Duration{40 * s, 40 * s}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := backoff{first: tc.first}
			for i, ran := range tc.ran {
				if got := b.next(ran); got != tc.want[i] {
					t.Errorf("wait %d (after %v): %v, want %v", i, ran, got, tc.want[i])
				}
			}
		})
	}
}
