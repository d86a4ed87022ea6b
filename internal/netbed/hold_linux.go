//go:build linux

package netbed

// Note [Delay without netem]
//
// Kernels without netem (nor fq or etf, whose departure times a BPF program could set, nor
// nft's queue statement) still have iptables' NFQUEUE target (xt, through nft's compat
// layer). Each host's namespace gets one rule,
//
//	iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0
//
// so that every IPv4 packet arriving at the host waits in the kernel until the holder
// accepts it. The holder reads each packet's id (metadata only: the payload is not copied,
// and GSO packets come whole, so a 64 KiB segment is one notice) and its arrival time (the
// kernel's receive stamp, which the holder turns on, so the holder's own wake-up does not
// add to the delay), and accepts, in arrival order, every packet whose time (arrival +
// delay) has come, with one batch verdict for all of them. The packet then goes on through the
// host's stack as if it had just arrived: a one-way delay, once per packet, on the receiving
// side, after the sender's tbf has serialized it (propagation after transmission, as on a
// wire). The veths, the bridge and their tbf stay as they are, so SetLink, DeleteLink and
// Loss act on the same interfaces with or without the delay. This was chosen over a TUN
// "wire" that would carry the packets through userspace: no payload crosses into
// userspace, and nothing about the topology changes.
//
// The holder is a child process (this binary re-executed with GP_NETBED_HOLD set; the
// package's init runs it and exits), not goroutines of the bed's process: Go's timers wake
// about 1 ms late here (the netpoller sleeps in whole ms), and threads blocked in sleeping
// syscalls would hold the process's Ps, so the caller's goroutines (the test's, the bench's)
// would stall behind them. In the child each host has one thread, locked, SCHED_FIFO when
// the kernel allows (the wire's wake-ups do not queue behind the machine's other work), with
// timer slack 1 ns, which sleeps in ppoll until a packet arrives or the oldest one is due.
// It spins for nothing, so it costs CPU only per packet. A packet is never released before
// its due time (to the stamp's 1 µs resolution); it is late by the thread's wake-up after the due time, which Bed.DelayStats reports
// (on 2 vCPUs with 9 to 15 runnable threads: median 45-90 µs, p99 0.5-3 ms; TestMeasureDelay
// prints it), with the holder's CPU.
//
// Order: packet ids grow in arrival order and the delay is the same for all, so due times
// are in order, the queue is FIFO and a batch verdict (accept all ids up to n) releases a
// prefix of it: the due packets, and never one ahead of an earlier one. ARP is not IPv4 and is not delayed.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// holdQueueLen is the most packets a host's queue holds (1 ms at 10 Gbit/s is 830 full
// 1500-byte frames; most are 64 KiB GSO segments).
const holdQueueLen = 1 << 16

// holdEnv carries the child's work: "<delay ns> <namespace>...".
const holdEnv = "GP_NETBED_HOLD"

func init() {
	if v := os.Getenv(holdEnv); v != "" {
		if err := holdMain(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// holder is the running child process that delays the packets arriving at the hosts.
type holder struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	stderr  bytes.Buffer
	outDone chan struct{} // closed when the child's stdout is read to its end
	tail    string        // what the child printed after "ready": its stats line
}

// startHolder starts the child for the namespaces nss and waits until it has bound their
// queues; the caller then adds the NFQUEUE rules, and calls stop when done.
func startHolder(ctx context.Context, nss []string, delay time.Duration) (*holder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("netbed: delay holder: own executable: %w", err)
	}
	h := &holder{cmd: exec.Command(exe), outDone: make(chan struct{})}
	h.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s", holdEnv, delay.Nanoseconds(), strings.Join(nss, " ")))
	h.cmd.Stderr = &h.stderr
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("netbed: delay holder: %w", err)
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("netbed: delay holder: %w", err)
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("netbed: delay holder: start %s: %w", exe, err)
	}
	ready := make(chan error, 1)
	go func() {
		defer close(h.outDone)
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
		rest, _ := io.ReadAll(r)
		h.tail = string(rest)
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("netbed: delay holder: %w: %s", err, bytes.TrimSpace(h.stderr.Bytes()))
	}
	return h, nil
}

// stop ends the child (the kernel drops the packets still waiting) and returns what it
// measured, and an error when it had failed.
func (h *holder) stop() (DelayStats, error) {
	h.stdin.Close() // the child exits at EOF (also when the bed's process dies)
	select {
	case <-h.outDone:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.outDone
	}
	err := h.cmd.Wait()
	var st DelayStats
	if ps := h.cmd.ProcessState; ps != nil {
		st.CPU, st.KernelCPU = ps.UserTime()+ps.SystemTime(), ps.SystemTime()
	}
	var p50, p90, p99, pmax int64
	if _, serr := fmt.Sscanf(h.tail, "late %d %d %d %d %d", &st.Packets, &p50, &p90, &p99, &pmax); serr == nil {
		st.Late50, st.Late90 = time.Duration(p50)*time.Microsecond, time.Duration(p90)*time.Microsecond
		st.Late99, st.LateMax = time.Duration(p99)*time.Microsecond, time.Duration(pmax)*time.Microsecond
	}
	if err != nil {
		return st, fmt.Errorf("netbed: delay holder: %w: %s", err, bytes.TrimSpace(h.stderr.Bytes()))
	}
	return st, nil
}

// holdMain is the child: it binds queue 0 in each namespace, says "ready", holds packets
// with one thread per namespace and returns at EOF on stdin or on the first error.
func holdMain(spec string) error {
	f := strings.Fields(spec)
	if len(f) < 2 {
		return fmt.Errorf("netbed: %s=%q: want a delay and namespaces", holdEnv, spec)
	}
	delay, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return fmt.Errorf("netbed: %s: delay: %w", holdEnv, err)
	}
	runtime.GOMAXPROCS(len(f) + 2) // a P for each host's thread, stdin's reader and the runtime
	var qs []*nfqueue
	for _, ns := range f[1:] {
		var q *nfqueue
		if err := inNamespace(ns, func() (err error) {
			q, err = openQueue(0, holdQueueLen)
			return err
		}); err != nil {
			return err
		}
		qs = append(qs, q)
	}
	// A socket asking for receive timestamps turns on the kernel's stamping of every
	// received packet (a global switch), so each notice says when its packet arrived.
	if ts, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		defer unix.Close(ts)
		unix.SetsockoptInt(ts, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}
	errc := make(chan error, len(qs)+1)
	for _, q := range qs {
		go func() { errc <- hold(q, delay) }()
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		errc <- nil
	}()
	fmt.Println("ready")
	err = <-errc
	fmt.Println(lateness.String())
	return err
}

// lateHist counts the packets released by how late they were past their due time, by µs
// (the last bucket: 10 ms or later). All hosts' threads add to it.
type lateHist [10001]atomic.Int64

var lateness lateHist

func (h *lateHist) add(ns int64) { h[min(max(ns, 0)/1000, int64(len(h)-1))].Add(1) }

// String is "late <packets> <p50> <p90> <p99> <max>", the lateness in µs.
func (h *lateHist) String() string {
	var n int64
	for i := range h {
		n += h[i].Load()
	}
	q := func(f float64) int {
		want, c := int64(f*float64(n)), int64(0)
		for i := range h {
			if c += h[i].Load(); c > want {
				return i
			}
		}
		return len(h) - 1
	}
	last := 0
	for i := range h {
		if h[i].Load() > 0 {
			last = i
		}
	}
	return fmt.Sprintf("late %d %d %d %d %d", n, q(0.5), q(0.9), q(0.99), last)
}

// hold delays the packets of q by delay ns, on a thread of its own, until an error.
func hold(q *nfqueue, delay int64) error {
	runtime.LockOSThread() // never unlocked: the thread's settings die with it
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// SCHED_FIFO, low priority: above every ordinary thread, below the kernel's own.
	unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 10}, 0)
	if err := unix.SetNonblock(q.fd, true); err != nil {
		return fmt.Errorf("netbed: delay holder: %w", err)
	}
	var (
		ids  []uint32 // waiting packets from head on, oldest first
		due  []int64
		head int
		buf  = make([]byte, 64<<10)
		pfd  = []unix.PollFd{{Fd: int32(q.fd), Events: unix.POLLIN}}
		got  []notice
	)
	for {
		var timeout *unix.Timespec
		if head < len(ids) {
			ts := unix.NsecToTimespec(max(0, due[head]-monoNow()))
			timeout = &ts
		}
		if _, err := unix.Ppoll(pfd, timeout, nil); err != nil && err != unix.EINTR {
			return fmt.Errorf("netbed: delay holder: ppoll: %w", err)
		}
		now, real := monoNow(), realNow()
		for {
			n, _, err := unix.Recvfrom(q.fd, buf, 0)
			if err == unix.EAGAIN || err == unix.EINTR || err == unix.ENOBUFS {
				break
			}
			if err != nil {
				return fmt.Errorf("netbed: delay holder: read: %w", err)
			}
			got = notices(buf[:n], got[:0])
			for _, p := range got {
				// Arrival: the kernel's stamp when the packet has one (it does once
				// timestamps are on, see holdMain), else now; never later than now.
				arrived := now
				if p.arrived > 0 {
					arrived = now - min(max(real-p.arrived, 0), maxStampAge)
				}
				ids, due = append(ids, p.id), append(due, arrived+delay)
			}
		}
		if head == len(ids) {
			ids, due, head = ids[:0], due[:0], 0
			continue
		}
		if head >= 4096 && head > len(ids)/2 { // a queue that never empties (a stream)
			ids, due, head = append(ids[:0], ids[head:]...), append(due[:0], due[head:]...), 0
		}
		now = monoNow()
		first := head
		for head < len(ids) && due[head] <= now {
			head++
		}
		for k := first; k < head; k++ {
			lateness.add(now - due[k])
		}
		if head > first {
			if err := q.acceptUpTo(ids[head-1]); err != nil {
				return fmt.Errorf("netbed: delay holder: verdict: %w", err)
			}
		}
	}
}

// maxStampAge caps how old a packet's kernel stamp may say it is (a clock step must not
// release packets at once).
const maxStampAge = int64(50 * time.Millisecond)

// realNow is CLOCK_REALTIME in ns (the clock of the kernel's packet stamps).
func realNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return ts.Nano()
}

// monoNow is CLOCK_MONOTONIC in ns.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// inNamespace runs fn on a thread that has entered network namespace ns (sockets fn opens
// belong to ns for their whole life). The thread goes back to the original namespace; if
// it cannot, it is discarded (its goroutine ends locked).
func inNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netbed: own namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netbed: namespace %s: %w", ns, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netbed: enter %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("netbed: leave %s: %w", ns, err))
			return // still locked: the runtime ends this thread with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
