package main

import "testing"

// TestMedianRep checks which repetition stands for the run: the median ratio (the lower
// middle of an even count), skipping repetitions without a ratio; without any ratio, the
// median of our seconds to the target; without those, our best top-1.
func TestMedianRep(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	withRatio := func(r *float64, secs *float64, best float64) repetition {
		return repetition{Ratio: r, Sides: []side{{SecondsToGoal: secs, BestTop1: best}}}
	}
	for _, tc := range []struct {
		name string
		reps []repetition
		want int
	}{
		{"one", []repetition{withRatio(f(1.2), f(9), 92)}, 0},
		{"three", []repetition{withRatio(f(1.6), f(9), 92), withRatio(f(1.2), f(9), 92), withRatio(f(1.4), f(9), 92)}, 2},
		{"four, lower middle", []repetition{withRatio(f(1.6), f(9), 92), withRatio(f(1.2), f(9), 92), withRatio(f(1.5), f(9), 92), withRatio(f(1.4), f(9), 92)}, 3},
		{"a repetition without ratio is skipped", []repetition{withRatio(nil, nil, 90), withRatio(f(1.3), f(9), 92), withRatio(f(1.1), f(9), 92), withRatio(f(1.7), f(9), 92)}, 1},
		{"no PyTorch: our seconds", []repetition{withRatio(nil, f(80), 92), withRatio(nil, f(60), 92), withRatio(nil, f(70), 92)}, 2},
		{"never reached: our best", []repetition{withRatio(nil, nil, 89), withRatio(nil, nil, 90.5), withRatio(nil, nil, 90)}, 2},
	} {
		if got := medianRep(tc.reps); got != tc.want {
			t.Errorf("%s: medianRep = %d, want %d", tc.name, got, tc.want)
		}
	}
}
