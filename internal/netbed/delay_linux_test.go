package netbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lateBound is how late past its due time the holder may release the median packet: its
// wake-up from ppoll on a SCHED_FIFO thread with timer slack 1 ns, whose median is tens of
// µs on a 2-vCPU machine loaded several times over (TestMeasureDelay prints it).
const lateBound = 250 * time.Microsecond

// rttBound is how much a median round trip may exceed twice the one-way delay: the holder's
// lateness in both directions plus the two endpoints' own wake-ups after a millisecond
// asleep, which on a loaded machine dominate (at delay 1 ms, medians of 2.15 to 3.06 ms on
// 2 vCPUs with 5 to 12 runnable threads, while a ping-pong without delay takes 0.02 ms). 2 ms still fails a delay applied twice per direction (at least 4 ms) or
// not at all (the minimum check).
const rttBound = 2 * time.Millisecond

// With a one-way delay, no round trip is shorter than twice the delay (packets are never
// released early), the holder releases the median packet within lateBound of its due time
// and the median round trip is within rttBound of twice the delay; without delay the round
// trip is far below.
func TestDelayRTT(t *testing.T) {
	for _, c := range []struct {
		link Link
		min  time.Duration // every round trip at least
		max  time.Duration // the median below
	}{
		{Link{Rate: "1gbit"}, 0, time.Millisecond},
		{Link{Rate: "1gbit", Delay: time.Millisecond}, 2 * time.Millisecond, 2*time.Millisecond + rttBound},
		{Link{Delay: time.Millisecond}, 2 * time.Millisecond, 2*time.Millisecond + rttBound},
	} {
		t.Run(fmt.Sprintf("%s/%v", c.link.Rate, c.link.Delay), func(t *testing.T) {
			b := New(t, 2, c.link)
			r := pingPong(t, b, 200)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			st := b.DelayStats()
			t.Logf("%s: RTT min %v median %v p90 %v max %v; holder %+v", b.Shaping, r[0], r[len(r)/2], r[len(r)*9/10], r[len(r)-1], st)
			if r[0] < c.min {
				t.Errorf("shortest round trip %v, want at least %v (twice the delay)", r[0], c.min)
			}
			if med := r[len(r)/2]; med >= c.max {
				t.Errorf("median round trip %v, want below %v", med, c.max)
			}
			if st.Packets > 0 && st.Late50 >= lateBound {
				t.Errorf("holder released the median packet %v late, want below %v", st.Late50, lateBound)
			}
		})
	}
}

// The faults act on a delayed link as on a plain one: a link set down stops the ping-pong,
// set up again it resumes; Loss drops every packet and counts them; DeleteLink works. Close
// then leaves no namespace, no holder process and no goroutine.
func TestDelayFaultsAndClose(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	b := New(t, 2, Link{Rate: "1gbit", Delay: 500 * time.Microsecond})
	if b.hold == nil {
		t.Skipf("no userspace delay here (%s)", b.Shaping)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := b.Listen(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo := make(chan net.Conn, 1) // the server's side, closed at the end (host 0's loss keeps a FIN from it)
	go func() {
		if c, err := l.Accept(); err == nil {
			echo <- c
			io.Copy(c, c)
		}
	}()
	c, err := b.Dial(ctx, 0, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// ping sends one byte and waits up to d for it to come back.
	ping := func(d time.Duration) error {
		c.SetDeadline(time.Now().Add(d))
		one := []byte{1}
		if _, err := c.Write(one); err != nil {
			return err
		}
		_, err := io.ReadFull(c, one)
		return err
	}
	if err := ping(5 * time.Second); err != nil {
		t.Fatalf("before the faults: %v", err)
	}
	if err := b.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := ping(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("link down: ping got %v, want a timeout", err)
	}
	if err := b.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	// TCP retransmits the lost byte (and the second one) once the link is back.
	if err := ping(10 * time.Second); err != nil {
		t.Fatalf("link up again: %v", err)
	}
	if _, err := io.ReadFull(c, []byte{0}); err != nil {
		t.Fatalf("link up again, the byte sent while it was down: %v", err)
	}
	if err := b.Loss(ctx, 0, 1); errors.Is(err, ErrUnavailable) {
		t.Log(err)
	} else if err != nil {
		t.Fatal(err)
	} else {
		if err := ping(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("loss 1: ping got %v, want a timeout", err)
		}
		if n, err := b.Dropped(ctx, 0); err != nil || n == 0 {
			t.Fatalf("loss 1: dropped %d, %v; want some", n, err)
		}
	}
	// Deleting a link leaves the holder running (it holds what reaches the host, nothing
	// now), and Close still stops it cleanly.
	if err := b.DeleteLink(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pid := b.hold.cmd.Process.Pid
	ns := b.Namespace(1)
	c.Close()
	(<-echo).Close()
	l.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The echo goroutine ends once it sees the connection closed; the bed's own goroutines
	// (the holder's output reader, exec's) have ended with Close.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines after Close, %d before the bed:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("holder process %d still runs after Close", pid)
	}
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		t.Errorf("%s still exists after Close", ns)
	}
	if st := b.DelayStats(); st.CPU <= 0 || st.Packets == 0 {
		t.Errorf("DelayStats %+v after Close, want the holder's CPU time and packets", st)
	}
}

// pingPong measures n round trips of one byte over TCP from host 0 to host 1 (after 20
// unmeasured ones) and returns them sorted.
func pingPong(t testing.TB, b *Bed, n int) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := b.Listen(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := b.Dial(ctx, 0, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(25 * time.Second))
	one := []byte{1}
	rtts := make([]time.Duration, 0, n)
	for i := range n + 20 {
		start := time.Now()
		if _, err := c.Write(one); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			t.Fatal(err)
		}
		if i >= 20 {
			rtts = append(rtts, time.Since(start))
		}
	}
	slices.Sort(rtts)
	return rtts
}

// stream sends bytes from host 0 to host 1 over one TCP connection and returns the rate
// the receiver saw in bits per second.
func stream(t testing.TB, b *Bed, bytes int64) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := b.Listen(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan float64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			got <- 0
			return
		}
		start := time.Now()
		n, _ := io.CopyBuffer(io.Discard, c, buf)
		got <- float64(n+1) * 8 / time.Since(start).Seconds()
	}()
	c, err := b.Dial(ctx, 0, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for sent := int64(0); sent < bytes; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	r := <-got
	c.Close()
	return r
}

// TestMeasureDelay prints the holder's lateness, round trips and stream throughput with and
// without delay (GP_NETBED_MEASURE=1; about a minute): each setting twice, alternating, on 2
// hosts.
func TestMeasureDelay(t *testing.T) {
	if os.Getenv("GP_NETBED_MEASURE") == "" {
		t.Skip("set GP_NETBED_MEASURE=1")
	}
	for pass := range 2 {
		for _, d := range []time.Duration{0, 100 * time.Microsecond, 500 * time.Microsecond, time.Millisecond} {
			b := New(t, 2, Link{Rate: "1gbit", Delay: d})
			r := pingPong(t, b, 500)
			b.Close()
			st := b.DelayStats()
			fmt.Printf("pass %d: delay %-6v RTT of 500 1-byte TCP ping-pongs: min %v p10 %v median %v p90 %v p99 %v; median - 2×delay %v; holder: %d packets released late by p50 %v p90 %v p99 %v max %v, CPU %v (kernel %v) [%s] load %s\n",
				pass, d, r[0], r[len(r)/10], r[len(r)/2], r[len(r)*9/10], r[len(r)*99/100], r[len(r)/2]-2*d,
				st.Packets, st.Late50, st.Late90, st.Late99, st.LateMax, st.CPU, st.KernelCPU, b.Shaping, loadAvg())
		}
		for _, rate := range []string{"1gbit", "10gbit"} {
			for _, d := range []time.Duration{0, 500 * time.Microsecond} {
				b := New(t, 2, Link{Rate: rate, Delay: d})
				size := int64(1 << 30)
				if rate == "1gbit" {
					size = 512 << 20
				}
				start := time.Now()
				bps := stream(t, b, size)
				wall := time.Since(start)
				b.Close()
				st := b.DelayStats()
				fmt.Printf("pass %d: %s delay %v: one TCP stream of %d MiB %.2f Gbit/s; holder: %d packets late by p50 %v p90 %v p99 %v, CPU %v (kernel %v) over %v (%.0f%% of one core) [%s] load %s\n",
					pass, rate, d, size>>20, bps/1e9, st.Packets, st.Late50, st.Late90, st.Late99, st.CPU.Round(time.Millisecond), st.KernelCPU.Round(time.Millisecond),
					wall.Round(time.Millisecond), 100*st.CPU.Seconds()/wall.Seconds(), b.Shaping, loadAvg())
			}
		}
	}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
