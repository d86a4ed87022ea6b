package c10drdzv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gorgonia-parallel/gp/parallel/comm/store"
	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// coordinator decides the rounds; it runs on the node that hosts the store (see Note [c10d
// rounds]). All it knows it reads from the store, so nothing is lost between its polls.
type coordinator struct {
	cfg    Config
	st     *store.Store
	prefix string
	secret string // the workers' secret, the same in every round
}

func (c *coordinator) key(v int64, rest string) string {
	return c.prefix + "r" + strconv.FormatInt(v, 10) + "/" + rest
}

// run gathers and watches round after round until ctx ends.
func (c *coordinator) run(ctx context.Context) {
	c.secret = launch.RandomHex(16)
	v, err := c.st.Add(ctx, c.prefix+"round", 0)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		members, ok := c.gather(ctx, v)
		if !ok {
			return
		}
		why := c.watch(ctx, v, members)
		if why == "" {
			return
		}
		c.cfg.Log("c10d rendezvous: round %d ended: %s", v, why)
		if c.st.Set(ctx, c.key(v, "ended"), []byte(why)) != nil {
			return
		}
		if v, err = c.st.Add(ctx, c.prefix+"round", 1); err != nil {
			return
		}
	}
}

// gather waits until round v may complete, checks the registrations against the first and
// publishes the round; it returns the members' join indexes.
func (c *coordinator) gather(ctx context.Context, v int64) ([]int, bool) {
	var count int64
	changedAt := time.Now()
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		n, err := c.st.Add(ctx, c.key(v, "n"), 0)
		if err != nil {
			return nil, false
		}
		if n != count {
			count, changedAt = n, time.Now()
		}
		if int(count) >= c.cfg.MaxNodes || int(count) >= c.cfg.MinNodes && time.Since(changedAt) >= c.cfg.LastCall {
			break
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-tick.C:
		}
	}
	fin := final{Secret: c.secret, Refused: map[int]string{}}
	var first registration
	for idx := range int(count) {
		gctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
		b, err := c.st.Get(gctx, c.key(v, "node/"+strconv.Itoa(idx)))
		cancel()
		if err != nil {
			return nil, false
		}
		fin.admit(&first, idx, b, c.cfg.MaxNodes)
	}
	for idx, why := range fin.Refused {
		c.cfg.Log("c10d rendezvous: round %d: refused join %d: %s", v, idx, why)
	}
	if len(fin.Members) < c.cfg.MinNodes {
		// Refusals left too few: publish them, and gather again in the same round.
		fin.Members = nil
	}
	b, _ := json.Marshal(fin)
	if c.st.Set(ctx, c.key(v, "final"), b) != nil {
		return nil, false
	}
	if _, err := c.st.Add(ctx, c.key(v, "closed"), 1); err != nil {
		return nil, false
	}
	c.cfg.Log("c10d rendezvous: round %d complete: %d nodes", v, len(fin.Members))
	return fin.Members, true
}

// watch returns why round v (with the given members) ends: "failure: ..." or
// "membership: ...", or "" when ctx ended.
func (c *coordinator) watch(ctx context.Context, v int64, members []int) string {
	if len(members) == 0 {
		return "membership: too few nodes after refusals; gathering again"
	}
	type beat struct {
		n  int64
		at time.Time
	}
	beats := make([]beat, len(members))
	for i := range beats {
		beats[i].at = time.Now()
	}
	lostAfter := c.cfg.KeepAlive * time.Duration(c.cfg.KeepAliveMisses)
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
		if n, err := c.st.Add(ctx, c.key(v, "failed"), 0); err != nil {
			return ""
		} else if n > 0 {
			for rank := range members {
				if f, _ := c.st.Add(ctx, c.key(v, "failed/"+strconv.Itoa(rank)), 0); f > 0 {
					return fmt.Sprintf("failure: node %d's workers failed", rank)
				}
			}
			return "failure: a node's workers failed"
		}
		done, err := c.st.Add(ctx, c.key(v, "done"), 0)
		if err != nil {
			return ""
		}
		if done > 0 {
			// Finishing: nodes that succeeded stop their heartbeats as they leave.
			continue
		}
		for rank := range members {
			n, err := c.st.Add(ctx, c.key(v, "hb/"+strconv.Itoa(rank)), 0)
			if err != nil {
				return ""
			}
			if n != beats[rank].n {
				beats[rank] = beat{n, time.Now()}
			} else if time.Since(beats[rank].at) > lostAfter {
				return fmt.Sprintf("membership: node %d lost (no heartbeat for %v)", rank, time.Since(beats[rank].at).Round(time.Millisecond))
			}
		}
		if late, err := c.st.Add(ctx, c.key(v, "late"), 0); err != nil {
			return ""
		} else if late > 0 && len(members) < c.cfg.MaxNodes {
			return fmt.Sprintf("membership: %d node(s) waiting to join %d of at most %d", late, len(members), c.cfg.MaxNodes)
		}
	}
}

// admit decides on join idx, whose registration is b: refused (why in Refused) when b is
// unreadable or its node differs from the first member in processes or command, else a
// member while there are fewer than maxNodes. first is the first member's registration,
// set by the first admitted join.
func (fin *final) admit(first *registration, idx int, b []byte, maxNodes int) {
	var reg registration
	if err := json.Unmarshal(b, &reg); err != nil {
		fin.Refused[idx] = fmt.Sprintf("unreadable registration %.200q: %v", b, err)
		return
	}
	switch {
	case reg.NProc < 1:
		fin.Refused[idx] = fmt.Sprintf("node %.100s (at %.100s) registered --nproc-per-node %d: want at least 1", reg.ID, reg.Addr, reg.NProc)
		return
	case len(fin.Members) == 0:
		*first = reg
	case reg.NProc != first.NProc:
		fin.Refused[idx] = fmt.Sprintf("node %s (at %s) has --nproc-per-node %d, but node 0 (%s, at %s) has %d: every node needs the same",
			reg.ID, reg.Addr, reg.NProc, first.ID, first.Addr, first.NProc)
		return
	case commandKey(reg.Command) != commandKey(first.Command):
		fin.Refused[idx] = fmt.Sprintf("node %s (at %s) runs %q, but node 0 (%s, at %s) runs %q: every node must run the same program and arguments",
			reg.ID, reg.Addr, commandKey(reg.Command), first.ID, first.Addr, commandKey(first.Command))
		return
	}
	if len(fin.Members) < maxNodes {
		fin.Members = append(fin.Members, idx)
	}
}
