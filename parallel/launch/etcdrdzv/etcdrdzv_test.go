package etcdrdzv

import (
	"context"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/launch"
	"github.com/gorgonia-parallel/gp/parallel/launch/etcdrdzv/etcdtest"
)

func join(t *testing.T, rs []*Rendezvous) []launch.Round {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([]launch.Round, len(rs))
	errs := make(chan error, len(rs))
	for i, r := range rs {
		go func() {
			var err error
			out[i], err = r.Next(ctx)
			errs <- err
		}()
	}
	for range rs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func closed(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}

// Two nodes gather, get distinct ranks and one master; a failure on one ends the round for
// both, and the next round completes; a node that leaves ends the round for the other.
func TestRounds(t *testing.T) {
	ep := etcdtest.Start(t)
	ctx := context.Background()
	var rs []*Rendezvous
	for range 2 {
		r, err := New(ctx, Config{Endpoints: []string{ep}, RunID: "job1", NNodes: 2, Host: "127.0.0.1", TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	defer rs[0].Close()
	rounds := join(t, rs)
	if rounds[0].NodeRank+rounds[1].NodeRank != 1 || rounds[0].MasterPort != rounds[1].MasterPort ||
		rounds[0].MasterPort == 0 || rounds[0].Version != 0 || rounds[0].Secret == "" || rounds[0].Secret != rounds[1].Secret {
		t.Fatalf("round 0: %+v / %+v", rounds[0], rounds[1])
	}
	if closed(rounds[0].Changed, 100*time.Millisecond) {
		t.Fatal("round ended by itself")
	}
	if err := rs[1].Fail(ctx, rounds[1]); err != nil {
		t.Fatal(err)
	}
	for i, rd := range rounds {
		if !closed(rd.Changed, 5*time.Second) {
			t.Fatalf("node %d did not see round 0 end", i)
		}
	}
	rounds = join(t, rs)
	if rounds[0].Version != 1 || rounds[1].Version != 1 || rounds[0].NodeRank+rounds[1].NodeRank != 1 {
		t.Fatalf("round 1: %+v / %+v", rounds[0], rounds[1])
	}
	// A node that goes away (its lease revoked, as when it expires) ends the round.
	rs[1].Close()
	if !closed(rounds[0].Changed, 5*time.Second) {
		t.Fatal("the survivor did not see round 1 end when the other node left")
	}
}

func TestNoEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := New(ctx, Config{Endpoints: []string{"127.0.0.1:1"}, RunID: "x", NNodes: 2})
	if err == nil {
		r.Close()
		t.Fatal("New succeeded without etcd")
	}
	t.Log(err)
}
