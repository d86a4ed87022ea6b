package zero

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/parallel/comm"
)

// fakeWork is a reduce-scatter that has completed (Done closed) or not yet; Wait returns
// err at once, as a completed one would.
type fakeWork struct {
	done chan struct{}
	err  error
}

func (w *fakeWork) Wait(context.Context) error { return w.err }
func (w *fakeWork) Done() <-chan struct{}      { return w.done }

// fakeReducer logs the schedule's calls; its works complete at once unless pending, and
// fail where fail names the unit.
type fakeReducer struct {
	log     []string
	pending bool
	fail    int // unit whose reduce-scatter fails; -1: none
	works   []*fakeWork
}

func (f *fakeReducer) Launch(u int) comm.Work {
	f.log = append(f.log, fmt.Sprintf("launch %d", u))
	w := &fakeWork{done: make(chan struct{})}
	if !f.pending {
		close(w.done)
	}
	if u == f.fail {
		w.err = errors.New("peer gone")
	}
	f.works = append(f.works, w)
	return w
}

func (f *fakeReducer) Retire(u int, _ comm.Work) error {
	f.log = append(f.log, fmt.Sprintf("retire %d", u))
	return nil
}

// The gradient schedule on its own, over three units of two parameters each (fc1, fc2,
// fc3), gradients arriving in backward order: which unit is launched and retired when, on
// the host and in stream order, with incomplete units, a failed reduce-scatter and a
// gradient that arrives twice.
func TestReduceSchedule(t *testing.T) {
	m, err := nn.NewModel(mlp(4))
	if err != nil {
		t.Fatal(err)
	}
	lay, err := NewLayout(m.Params, 2, 0, DepthKey(1))
	if err != nil {
		t.Fatal(err)
	}
	un := lay.Units()
	if len(un) != 3 || len(un[0].Params) != 2 || len(un[1].Params) != 2 || len(un[2].Params) != 2 {
		t.Fatalf("layout: %v, want 3 units of 2 parameters", un)
	}
	var ps []*nn.Param // in unit order
	for _, u := range un {
		ps = append(ps, u.Params...)
	}
	backward := []*nn.Param{ps[5], ps[4], ps[3], ps[2], ps[1], ps[0]}
	for _, tc := range []struct {
		name    string
		stream  bool
		pending bool        // the host's works have not completed before Finish
		used    []*nn.Param // nil: all (ps[2k], ps[2k+1] are unit k's)
		grads   []*nn.Param
		fail    int
		runErr  error  // the tape's
		want    string // the log, then "| " and Finish's error
		firsts  string // Arrive's first, one letter per gradient
	}{
		{name: "host", grads: backward, fail: -1, firsts: "yn yn yn",
			want: "launch 2 retire 2 launch 1 retire 1 launch 0 retire 0 |"},
		{name: "host, reductions still running", pending: true, grads: backward, fail: -1, firsts: "yn yn yn",
			want: "launch 2 launch 1 launch 0 retire 2 retire 1 retire 0 |"},
		{name: "stream order", stream: true, grads: backward, fail: -1, firsts: "yn yn yn",
			want: "launch 2 launch 1 retire 2 launch 0 retire 1 retire 0 |"},
		{name: "incomplete units launched after the tape", grads: []*nn.Param{ps[5], ps[2], ps[0]}, fail: -1, firsts: "y y y",
			want: "launch 0 launch 1 launch 2 retire 0 retire 1 retire 2 |"},
		{name: "a failed tape launches nothing more", grads: []*nn.Param{ps[5], ps[4], ps[3]}, fail: -1, runErr: errors.New("tape: out of memory"),
			firsts: "yn y", want: "launch 2 retire 2 | tape: out of memory"},
		{name: "a unit with no used parameter is not reduced", used: ps[2:], grads: backward[:4], fail: -1, firsts: "yn yn",
			want: "launch 2 retire 2 launch 1 retire 1 |"},
		{name: "a failed reduce-scatter", grads: backward, fail: 1, firsts: "yn y",
			want: "launch 2 retire 2 launch 1 | reduce-scatter of unit fc2: peer gone"},
		{name: "a failed reduce-scatter in stream order", stream: true, grads: backward, fail: 1, firsts: "yn yn y",
			want: "launch 2 launch 1 retire 2 launch 0 | reduce-scatter of unit fc2: peer gone"},
		{name: "a gradient twice", grads: []*nn.Param{ps[5], ps[5]}, fail: -1, firsts: "y",
			want: "| gradient of " + ps[5].Name + " arrived twice in one Run, or after its unit's reduce-scatter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeReducer{pending: tc.pending, fail: tc.fail}
			used := tc.used
			if used == nil {
				used = ps
			}
			s := NewReduceSchedule[comm.Work](lay, used, f, tc.stream)
			for run := range 2 { // a second Run starts afresh
				f.log, f.works = nil, nil
				s.Begin(context.Background())
				var firsts []string
				for i, p := range tc.grads {
					if i > 0 && lay.UnitOf(p.Index) != lay.UnitOf(tc.grads[i-1].Index) {
						firsts = append(firsts, " ")
					}
					first, err := s.Arrive(p)
					if err != nil { // the hook's error ends the tape
						break
					}
					firsts = append(firsts, map[bool]string{true: "y", false: "n"}[first])
				}
				if tc.pending {
					for _, w := range f.works {
						close(w.done)
					}
				}
				err := s.Finish(tc.runErr)
				got := strings.TrimPrefix(strings.Join(f.log, " ")+" |", " ")
				if err != nil {
					got += " " + err.Error()
				}
				if got != tc.want {
					t.Errorf("run %d: got  %q\nwant %q", run, got, tc.want)
				}
				if fs := strings.Join(firsts, ""); fs != tc.firsts {
					t.Errorf("run %d: first gradients %q, want %q", run, fs, tc.firsts)
				}
			}
		})
	}
}
