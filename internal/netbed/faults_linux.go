//go:build linux

package netbed

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Faults a test injects into a running bed. Each acts on host i's link and returns once the
// kernel has applied it.

// SetLink sets host i's link up or down on the switch side: down, every packet between the
// host and the others vanishes without a reset, as when a cable is pulled.
func (b *Bed) SetLink(ctx context.Context, i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return run(ctx, "ip", "-n", b.ns[0], "link", "set", "p"+strconv.Itoa(i), state)
}

// DeleteLink deletes host i's veth pair: the host loses its interface and route, the switch
// its port.
func (b *Bed) DeleteLink(ctx context.Context, i int) error {
	return run(ctx, "ip", "-n", b.ns[0], "link", "del", "p"+strconv.Itoa(i))
}

// lossTable is the nftables table Loss creates in a host.
const lossTable = "gpnb_loss"

// Loss drops each packet entering or leaving host i's eth0 with probability p (0 < p ≤ 1;
// 1 drops all) and counts the drops (see Dropped). The kernels this was written on have no
// netem, so the drop is done by nftables (numgen random); without the nft command the error
// wraps ErrUnavailable. A later call replaces the earlier rule.
func (b *Bed) Loss(ctx context.Context, i int, p float64) error {
	if !(p > 0 && p <= 1) {
		return fmt.Errorf("netbed: loss probability %v: want 0 < p ≤ 1", p)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("%w: no nft for packet loss (install nftables; the kernel has no netem)", ErrUnavailable)
	}
	ns := b.Namespace(i)
	cond := ""
	if p < 1 {
		// numgen random mod 10^6 draws a uniform integer below 10^6 per packet.
		cond = fmt.Sprintf("numgen random mod 1000000 < %d ", int(p*1e6))
	}
	rules := fmt.Sprintf(`table inet %[1]s {
	chain in { type filter hook input priority 0; iifname "eth0" %[2]scounter drop; }
	chain out { type filter hook output priority 0; oifname "eth0" %[2]scounter drop; }
}
`, lossTable, cond)
	run(ctx, "ip", "netns", "exec", ns, "nft", "delete", "table", "inet", lossTable)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netbed: nft in %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

var packetsRE = regexp.MustCompile(`counter packets (\d+)`)

// Dropped is the number of packets Loss's rules dropped on host i so far.
func (b *Bed) Dropped(ctx context.Context, i int) (int64, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", b.Namespace(i), "nft", "list", "table", "inet", lossTable).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("netbed: nft list in %s: %v: %s", b.Namespace(i), err, strings.TrimSpace(string(out)))
	}
	var n int64
	for _, m := range packetsRE.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n, nil
}
