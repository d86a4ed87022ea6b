//go:build linux

package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const namePrefix = "gpnb-"

// cmdTimeout bounds every ip and tc command.
const cmdTimeout = 10 * time.Second

var seq atomic.Int64

// Create builds a bed of hosts (1 to 200) whose links are shaped as link says. Close
// removes it. The error wraps ErrUnavailable when the machine cannot host a bed.
func Create(ctx context.Context, hosts int, link Link) (*Bed, error) {
	if hosts < 1 || hosts > 200 {
		return nil, fmt.Errorf("netbed: %d hosts: want 1 to 200", hosts)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root (network namespaces)", ErrUnavailable)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: no %s (install iproute2)", ErrUnavailable, tool)
		}
	}
	removeStale(ctx)
	b := &Bed{prefix: fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), seq.Add(1)), Shaping: "none"}
	b.ns = append(b.ns, b.prefix+"-sw")
	for i := range hosts {
		b.ns = append(b.ns, fmt.Sprintf("%s-h%d", b.prefix, i))
	}
	for i, ns := range b.ns {
		if err := run(ctx, "ip", "netns", "add", ns); err != nil {
			b.Close()
			if i == 0 {
				return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
			}
			return nil, err
		}
	}
	if err := b.wire(ctx, hosts, link); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// wire makes the switch (a bridge in the first namespace), one veth pair per host (eth0 in
// the host, p<i> on the bridge), the addresses and the shaping.
func (b *Bed) wire(ctx context.Context, hosts int, link Link) error {
	sw := b.ns[0]
	steps := [][]string{
		{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", sw, "link", "set", "br0", "up"},
	}
	for i := range hosts {
		h, p := b.Namespace(i), "p"+strconv.Itoa(i)
		steps = append(steps,
			[]string{"ip", "-n", sw, "link", "add", p, "type", "veth", "peer", "name", "eth0", "netns", h},
			[]string{"ip", "-n", sw, "link", "set", p, "master", "br0", "up"},
			[]string{"ip", "-n", h, "addr", "add", b.Addr(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", h, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", h, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	if link.Rate == "" && link.Delay == 0 {
		return nil
	}
	hold := false
	for i := range hosts {
		noNetem, err := b.shape(ctx, b.Namespace(i), "eth0", link, true)
		if err != nil {
			return err
		}
		hold = hold || noNetem && link.Delay > 0
		if _, err := b.shape(ctx, sw, "p"+strconv.Itoa(i), link, false); err != nil {
			return err
		}
	}
	if hold {
		return b.holdAll(ctx, link)
	}
	return nil
}

// holdAll delays the packets arriving at every host by link.Delay in userspace (Note
// [Delay without netem]): the holder process, then in each host the rule that feeds it.
func (b *Bed) holdAll(ctx context.Context, link Link) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("%w: delay %v without netem needs iptables (NFQUEUE); install iptables", ErrUnavailable, link.Delay)
	}
	var err error
	if b.hold, err = startHolder(ctx, b.ns[1:], link.Delay); err != nil {
		return fmt.Errorf("%w: delay without netem: %w", ErrUnavailable, err)
	}
	for i := range b.Hosts() {
		if err := run(ctx, "ip", "netns", "exec", b.Namespace(i), "iptables", "-w", "-t", "mangle", "-A", "PREROUTING",
			"-i", "eth0", "-j", "NFQUEUE", "--queue-num", "0"); err != nil {
			return fmt.Errorf("%w: delay without netem: %w", ErrUnavailable, err)
		}
	}
	tbf := b.Shaping
	if tbf == "none" {
		tbf = ""
	} else {
		tbf += " + "
	}
	b.Shaping = fmt.Sprintf("%suserspace NFQUEUE delay %v on each host's ingress", tbf, link.Delay)
	return nil
}

// shape puts link's qdisc on dev in ns: netem (delay on the host's side only, so that a
// packet is delayed once; rate on both) or, where the kernel has no netem, tbf for the rate
// (noNetem true: the caller adds the delay).
func (b *Bed) shape(ctx context.Context, ns, dev string, link Link, host bool) (noNetem bool, err error) {
	netem := []string{"netem"}
	if host && link.Delay > 0 {
		netem = append(netem, "delay", fmt.Sprintf("%dus", link.Delay.Microseconds()))
	}
	if link.Rate != "" {
		netem = append(netem, "rate", link.Rate)
	}
	if len(netem) == 1 {
		return false, nil
	}
	netem = append(netem, "limit", "100000")
	err = run(ctx, "tc", append([]string{"-n", ns, "qdisc", "add", "dev", dev, "root"}, netem...)...)
	if err == nil {
		b.Shaping = strings.Join(netem[:len(netem)-2], " ")
		return false, nil
	}
	if !strings.Contains(err.Error(), "unknown") {
		return false, err
	}
	if link.Rate == "" {
		return true, nil
	}
	bps, perr := RateBits(link.Rate)
	if perr != nil {
		return true, perr
	}
	// A burst of 4 ms of traffic (at least 256 KiB, for 64 KiB segments), a queue of 50 ms.
	burst := max(256<<10, bps/8/250)
	if err := run(ctx, "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", link.Rate,
		"burst", strconv.FormatInt(burst, 10), "latency", "50ms"); err != nil {
		return true, err
	}
	b.Shaping = "tbf rate " + link.Rate
	return true, nil
}

// Close stops the delay holder, kills the processes still inside the bed's namespaces and
// deletes the namespaces (their veths, qdiscs and rules go with them).
func (b *Bed) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if b.hold != nil {
		st, err := b.hold.stop()
		if err != nil {
			errs = append(errs, err)
		}
		b.delay, b.hold = st, nil
	}
	for _, ns := range b.ns {
		if err := removeNS(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNS kills ns's processes and deletes it; a namespace that is already gone is fine.
func removeNS(ctx context.Context, ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	killIn(ctx, ns)
	return run(ctx, "ip", "netns", "del", ns)
}

// killIn kills the processes inside ns (ours: only the bed's ranks run there) and waits up
// to 5 s for them to go.
func killIn(ctx context.Context, ns string) {
	for range 50 {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if err != nil || len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeStale removes the namespaces of beds whose creating process is gone (a test that
// was killed before its cleanup ran).
func removeStale(ctx context.Context) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], namePrefix) {
			continue
		}
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(f[0], namePrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil { // its creator still runs: not stale
			continue
		}
		removeNS(ctx, f[0])
	}
}

func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netbed: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
