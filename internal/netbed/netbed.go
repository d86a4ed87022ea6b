// Package netbed is a multi-host test bed on one machine: network namespaces (one per
// "host", plus one holding the switch), joined by veth pairs to a bridge, with links shaped by
// tc. Tests and benchmarks start ranks inside the hosts to run jobs across a real network
// stack. It needs root and iproute2; New skips the test, and Create fails with
// ErrUnavailable, saying why, when either is missing.
//
// Faults for tests: SetLink and DeleteLink cut a host off, Loss drops a share of its packets.
// Where the kernel has no netem (as on the machines this was built on: no netem, no gact,
// no fq, no nft queue) loss is made with nftables, the rate with tbf, and the delay in
// userspace: iptables' NFQUEUE holds each packet arriving at a host until a holder process
// the bed starts accepts it, delay later (see Note [Delay without netem] in hold_linux.go).
//
// Safety: addresses (10.213.0.0/24) exist only on interfaces inside the namespaces the bed
// created, so traffic between hosts never leaves them. Namespaces are named
// gpnb-<creator pid>-<seq>-...; Close removes the bed's processes, namespaces and with them
// their veths and qdiscs, and Create first removes the leftovers of beds whose creator died.
package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ErrUnavailable is wrapped by Create's error when the machine cannot host a bed (not root,
// no ip or tc, namespaces refused).
var ErrUnavailable = errors.New("netbed: unavailable")

// Link is the shaping of every host's link to the switch, both directions.
type Link struct {
	// Rate in tc's syntax ("1gbit", "10gbit"); "" leaves the link unshaped.
	Rate string
	// Delay is the one-way delay added to every packet between two hosts: by netem on the
	// sender's link, or, in kernels without netem, on the receiver's side by a holder
	// process the bed starts (the creating binary run again; it needs iptables and the
	// kernel's NFQUEUE target). Bed.Shaping says which.
	Delay time.Duration
}

// Bed is a set of hosts on one switch. Host i has address Addr(i) on its interface eth0.
type Bed struct {
	prefix string
	ns     []string // [0]: the switch, then the hosts
	// Shaping describes what each link got ("netem delay 500us rate 1gbit", "tbf rate 1gbit
	// + userspace NFQUEUE delay 500us on each host's ingress", "none").
	Shaping string

	hold  *holder    // the userspace delay (nil with netem or no delay)
	delay DelayStats // what the holder measured, set by Close
}

// DelayStats is what the userspace delay (the NFQUEUE holder process) measured over a
// bed's life.
type DelayStats struct {
	// Packets is the number of packets it held.
	Packets int64
	// Late50, Late90, Late99 and LateMax are percentiles of how late it released the
	// packets past their due time (arrival + delay), at µs resolution; the time a packet
	// then takes up the receiver's stack and to its application is not in them.
	Late50, Late90, Late99, LateMax time.Duration
	// CPU is the CPU time the holder used, KernelCPU the part of it in the kernel. Most of
	// it is kernel work that moved there rather than new work: an accepted packet goes up
	// the receiving host's stack (and what it triggers: an ACK, the sender's next segments)
	// inside the holder's verdict call, instead of in softirq context.
	CPU, KernelCPU time.Duration
}

// DelayStats is what the userspace delay measured: valid after Close; zero with netem or
// without delay.
func (b *Bed) DelayStats() DelayStats { return b.delay }

// Hosts is the number of hosts.
func (b *Bed) Hosts() int { return len(b.ns) - 1 }

// Addr is host i's IPv4 address (inside the bed only).
func (b *Bed) Addr(i int) string { return fmt.Sprintf("10.213.0.%d", i+1) }

// Namespace is host i's network namespace.
func (b *Bed) Namespace(i int) string { return b.ns[i+1] }

// Command runs name with args inside host i (ip netns exec). The caller starts and waits for
// it; ctx bounds it.
func (b *Bed) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", b.Namespace(i), name}, args...)...)
}

// New creates a bed of hosts for the test and removes it at its end (t.Cleanup); it skips
// the test, with the reason, when the machine cannot host one.
func New(t testing.TB, hosts int, link Link) *Bed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Create(ctx, hosts, link)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// RateBits parses tc's rate syntax ("10gbit", "100mbit", "64kbit", "800bit") into bits per
// second.
func RateBits(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				break
			}
			return int64(f * float64(u.mult)), nil
		}
	}
	return 0, fmt.Errorf("netbed: rate %q: want a positive number and bit, kbit, mbit or gbit", s)
}

// RankEnv is the launcher's environment of rank r of a job of local ranks per host, rank r
// on host r/local (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK), meeting at
// host 0's port (MASTER_ADDR, MASTER_PORT).
func (b *Bed) RankEnv(r, local, port int) []string {
	return []string{fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", b.Hosts()*local),
		fmt.Sprintf("LOCAL_RANK=%d", r%local), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", local),
		fmt.Sprintf("GROUP_RANK=%d", r/local), "MASTER_ADDR=" + b.Addr(0), fmt.Sprintf("MASTER_PORT=%d", port)}
}

// RunRanks runs the test binary (os.Args[0], no tests: it must act as a worker when the
// environment says so) as hosts×local ranks, rank r inside host r/local, with env and
// RankEnv's variables added, and returns each rank's combined
// output once all have exited. A rank that fails, or a job past timeout, fails the test with
// that rank's output.
func (b *Bed) RunRanks(t testing.TB, local, port int, timeout time.Duration, env ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	world := b.Hosts() * local
	cmds := make([]*exec.Cmd, world)
	outs := make([]*bytes.Buffer, world)
	for r := range world {
		cmd := b.Command(ctx, r/local, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), b.RankEnv(r, local, port)...)
		outs[r] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		cmds[r] = cmd
	}
	var failed []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: %v\n%s", r, err, outs[r]))
		}
	}
	if len(failed) > 0 {
		t.Fatal(failed)
	}
	res := make([]string, world)
	for r := range outs {
		res[r] = outs[r].String()
	}
	return res
}

// checksumLine is the line a worker prints with a digest of its final state.
var checksumLine = regexp.MustCompile(`(?m)^checksum \w+$`)

// SameChecksum checks RunRanks' outputs of workers that each print one "checksum <digest>"
// line of their final state and log their collectives: every output must match ran (the
// algorithm the test is about, for example `algo=hier`) and carry the same checksum line as
// rank 0's, which SameChecksum returns. It fails t naming the first rank that does not.
func SameChecksum(t testing.TB, outs []string, ran *regexp.Regexp) string {
	t.Helper()
	first := checksumLine.FindString(outs[0])
	for r, out := range outs {
		if !ran.MatchString(out) {
			t.Fatalf("rank %d's collectives log nothing matching %q:\n%s", r, ran, out)
		}
		if sum := checksumLine.FindString(out); sum == "" || sum != first {
			t.Fatalf("rank %d: %q, rank 0: %q", r, sum, first)
		}
	}
	return first
}
