package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// abortMakers are the transports the in-process abort and leave tests run on.
var abortMakers = []struct {
	name string
	mk   groupMaker
}{{"local", localMaker}, {"tcp", tcpMaker}, {"shm", shmMaker}}[:3-b2i(raceEnabled)]

var errBadJPEG = errors.New("trainer: decode /data/x.jpg: unexpected EOF")

// Rank 1 fails alone and aborts while rank 0 is blocked in an all-reduce: rank 0's
// all-reduce fails at once with an error naming rank 1 and its reason.
func TestAbortFailsPeersPendingCollective(t *testing.T) {
	for _, mk := range abortMakers {
		t.Run(mk.name, func(t *testing.T) {
			gs := mk.mk(t, 3, WithTimeout(20*time.Second))
			ctx := context.Background()
			// Stamped by one rank and read by others: the TCP happens-before is invisible to
			// the race detector.
			var abortAt atomic.Int64
			took := make([]time.Duration, len(gs)) // from the abort to each rank's failure
			errs := onAll(gs, func(g Group) error {
				if g.Rank() == 1 {
					time.Sleep(50 * time.Millisecond) // the others are blocked waiting for it
					abortAt.Store(time.Now().UnixNano())
					err := Abort(ctx, g, errBadJPEG)
					took[1] = since(&abortAt)
					return err
				}
				err := g.AllReduce(F32(make([]float32, 1000)), Sum).Wait(ctx)
				took[g.Rank()] = since(&abortAt)
				return err
			})
			if errs[1] != nil {
				t.Errorf("rank 1's Abort: %v", errs[1])
			}
			for _, r := range []int{0, 2} {
				err := errs[r]
				if !errors.Is(err, ErrAborted) || !errors.Is(err, ErrPeerGone) ||
					!strings.Contains(err.Error(), "comm: rank 1 aborted: "+errBadJPEG.Error()) {
					t.Errorf("rank %d: %v, want rank 1's abort with its reason", r, err)
				}
				var ae *AbortError
				if !errors.As(err, &ae) || ae.Rank != 1 || !ae.Remote {
					t.Errorf("rank %d: %#v is not rank 1's remote AbortError", r, err)
				}
			}
			if took[0] > time.Second || took[2] > time.Second || took[1] > abortLinger+time.Second {
				t.Errorf("peers failed %v and %v after the abort; Abort took %v", took[0], took[2], took[1])
			}
			t.Logf("peers failed %v and %v after the abort (Abort took %v): %v", took[0], took[2], took[1], errs[0])
			// The aborting rank's own operations fail with its reason.
			if err := gs[1].Barrier().Wait(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("rank 1 after Abort: %v, want ErrClosed", err)
			}
			if err := gs[0].Barrier().Wait(ctx); !errors.Is(err, ErrAborted) {
				t.Errorf("rank 0 after the abort: %v", err)
			}
		})
	}
}

// A rank that closes cleanly while a peer still waits in a collective it never joined fails
// that collective on the peer, naming it; one that closes after the last collective fails
// nothing.
func TestCloseWithPendingCollective(t *testing.T) {
	for _, mk := range abortMakers {
		t.Run(mk.name, func(t *testing.T) {
			gs := mk.mk(t, 2, WithTimeout(20*time.Second), WithCloseTimeout(300*time.Millisecond))
			ctx := context.Background()
			var closeAt atomic.Int64
			var took time.Duration // from rank 1's Close to rank 0's failure
			errs := onAll(gs, func(g Group) error {
				// Both complete seq 1; then rank 1 leaves while rank 0 is in seq 2.
				if err := g.AllReduce(F32(make([]float32, 64)), Sum).Wait(ctx); err != nil {
					return err
				}
				if g.Rank() == 1 {
					time.Sleep(50 * time.Millisecond)
					closeAt.Store(time.Now().UnixNano())
					return g.Close(ctx)
				}
				err := g.AllReduce(F32(make([]float32, 64)), Sum).Wait(ctx)
				took = since(&closeAt)
				return err
			})
			if errs[1] != nil {
				t.Errorf("rank 1's Close: %v", errs[1])
			}
			want := "peer rank 1 gone: it closed the group after collective seq 1, so collective seq 2 cannot complete"
			if !errors.Is(errs[0], ErrPeerGone) || !strings.Contains(errs[0].Error(), want) {
				t.Errorf("rank 0: %v, want %q", errs[0], want)
			}
			if took > time.Second {
				t.Errorf("rank 0 failed %v after rank 1 closed", took)
			}
			t.Logf("rank 0 failed %v after rank 1 closed: %v", took, errs[0])
		})
	}
}

func TestCleanLeaveFailsNothing(t *testing.T) {
	for _, mk := range abortMakers {
		t.Run(mk.name, func(t *testing.T) {
			gs := mk.mk(t, 3, WithTimeout(20*time.Second), WithCloseTimeout(2*time.Second))
			ctx := context.Background()
			errs := onAll(gs, func(g Group) error {
				for i := range 5 {
					// Large enough that the last frames are still in flight when a fast rank
					// has finished and leaves.
					b := make([]float32, 1<<18)
					for j := range b {
						b[j] = float32(g.Rank() + i)
					}
					if err := g.AllReduce(F32(b), Sum).Wait(ctx); err != nil {
						return err
					}
					if want := float32(3 + 3*i); b[len(b)-1] != want {
						return fmt.Errorf("step %d: %v, want %v", i, b[len(b)-1], want)
					}
				}
				if g.Rank() == 0 {
					time.Sleep(100 * time.Millisecond) // the others leave first
				}
				return g.Close(ctx)
			})
			noErrors(t, errs)
		})
	}
}

// Close does not wait for a peer that never leaves beyond WithCloseTimeout.
func TestCloseBoundedByCloseTimeout(t *testing.T) {
	for _, mk := range hostMakers {
		t.Run(mk.name, func(t *testing.T) {
			gs := mk.mk(t, 2, WithCloseTimeout(200*time.Millisecond))
			start := time.Now()
			if err := gs[1].Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Close waited %v for a peer that stayed", d)
			}
			// The peer that stayed fails its next collective naming the leaver.
			if err := gs[0].Barrier().Wait(context.Background()); !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "peer rank 1 gone") {
				t.Errorf("rank 0: %v", err)
			}
		})
	}
}

// since is the time since the instant stamped in ns.
func since(ns *atomic.Int64) time.Duration { return time.Duration(time.Now().UnixNano() - ns.Load()) }

// A Recv from a rank that left, cleanly or by Abort, fails at once naming it, whether it was
// pending when the notice came or issued after; a message sent before a clean leave is
// still received. The 20 s timeout is what the Recv waited for before.
func TestRecvFromLeftPeerFailsAtOnce(t *testing.T) {
	for _, how := range []string{"close", "abort"} {
		for _, mk := range abortMakers {
			t.Run(how+"/"+mk.name, func(t *testing.T) {
				gs := mk.mk(t, 2, WithTimeout(20*time.Second), WithCloseTimeout(300*time.Millisecond))
				ctx := context.Background()
				pending := gs[0].Recv(F32(make([]float32, 4)), 1, 3)
				if err := gs[1].Send(F32([]float32{1, 2, 3, 4}), 0, 7).Wait(ctx); err != nil {
					t.Fatal(err)
				}
				leaveAt := time.Now()
				left := make(chan error, 1)
				go func() { // Close waits for rank 0's own leave (up to 300 ms): not in took
					if how == "close" {
						left <- gs[1].Close(ctx)
					} else {
						left <- Abort(ctx, gs[1], errBadJPEG)
					}
				}()
				err := pending.Wait(ctx)
				took := time.Since(leaveAt)
				if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 1") {
					t.Errorf("pending Recv: %v, want ErrPeerGone naming rank 1", err)
				}
				if took > time.Second {
					t.Errorf("pending Recv failed %v after rank 1 left", took)
				}
				t.Logf("pending Recv failed %v after rank 1 left: %v", took, err)
				if err := <-left; how == "close" && err != nil {
					t.Fatal(err)
				}
				got := make([]float32, 4)
				err = gs[0].Recv(F32(got), 1, 7).Wait(ctx)
				if how == "close" && (err != nil || got[3] != 4) {
					t.Errorf("Recv of the message sent before Close: %v %v, want [1 2 3 4]", err, got)
				}
				if how == "abort" && !errors.Is(err, ErrPeerGone) {
					t.Errorf("Recv after the abort: %v, want ErrPeerGone", err)
				}
				start := time.Now()
				err = gs[0].Recv(F32(got), 1, 7).Wait(ctx)
				if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 1") || time.Since(start) > time.Second {
					t.Errorf("later Recv: %v after %v, want ErrPeerGone naming rank 1 at once", err, time.Since(start))
				}
			})
		}
	}
}
