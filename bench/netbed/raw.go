package main

// Raw mode (-raw): the bed's ceiling for plain TCP, with no collective logic. Each host runs
// one worker process that, like one step of a ring, sends to the next host and receives from
// the previous one at the same time, over k TCP streams per host pair (-raw-streams), with
// writes and reads of -raw-io bytes. Every worker reports its own time, its getrusage
// user/sys seconds and the machine's busy cores (/proc/stat) over the timed runs; the table
// gives the slowest host's GB/s sent, that as a fraction of the link rate (the same units as
// the collectives' "link" column: 1.0 is each host's uplink at the shaped rate), and CPU
// seconds per GB sent (the worker's own user+sys: the kernel work of the veth, bridge and tbf
// that softirqs do outside the worker shows only in the busy column).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/netbed"
)

var (
	raw        = flag.Bool("raw", false, "measure plain TCP (no collectives) on the same bed: the ceiling")
	rawStreams = flag.String("raw-streams", "1,2,4", "raw mode: TCP streams per host pair")
	rawBytes   = flag.Int("raw-bytes", 256<<20, "raw mode: bytes each host sends per timed run")
	rawIO      = flag.Int("raw-io", 1<<20, "raw mode: bytes per write and read call")
	rawSockBuf = flag.Int("raw-sockbuf", 0, "raw mode: SO_SNDBUF and SO_RCVBUF of every stream (0: the kernel's autotuning)")
	rawLowat   = flag.Int("raw-lowat", 0, "raw mode: SO_RCVLOWAT of every stream (0: the kernel's default)")
)

const rawWorkerEnv = "GP_NETBED_RAW_WORKER"

// rawSample is one raw worker's measurement over its timed runs.
type rawSample struct {
	Host    int     `json:"host"`
	Seconds float64 `json:"seconds"` // median time of one run (send and receive rawBytes)
	User    float64 `json:"user_s"`  // getrusage of the worker over all timed runs
	Sys     float64 `json:"sys_s"`
	Busy    float64 `json:"busy_cores"` // machine-wide busy cores over the timed runs
	Runs    int     `json:"runs"`
}

type rawRow struct {
	Hosts     int     `json:"hosts"`
	Rate      string  `json:"rate"`
	Shaping   string  `json:"shaping"`
	Streams   int     `json:"streams"`
	IOBytes   int     `json:"io_bytes"`
	Bytes     int     `json:"bytes"`
	GBps      float64 `json:"gbps"` // per host, each direction
	Link      float64 `json:"link_fraction"`
	CPUPerGB  float64 `json:"cpu_s_per_gb"` // worker user+sys per GB sent (and as much received)
	UserPerGB float64 `json:"user_s_per_gb"`
	SysPerGB  float64 `json:"sys_s_per_gb"`
	Busy      float64 `json:"busy_cores"`
	Load      float64 `json:"loadavg"`
}

// rawParent runs the raw workers for every host count, rate and stream count.
func rawParent() error {
	prov := benchutil.Start("netbed", os.Args[1:])
	var rows []rawRow
	port := 29700
	err := eachBed(10*time.Minute, func(ctx context.Context, hosts int, rate string, bps float64, bed *netbed.Bed) error {
		for _, ks := range strings.Split(*rawStreams, ",") {
			k, err := strconv.Atoi(ks)
			if err != nil || k < 1 {
				return fmt.Errorf("-raw-streams %q: want positive integers", *rawStreams)
			}
			load := benchutil.LoadAvg()
			port++
			ss, err := rawJob(ctx, bed, hosts, k, port)
			if err != nil {
				return fmt.Errorf("raw: %d hosts, %s, %d streams: %w", hosts, rate, k, err)
			}
			r := rawRow{Hosts: hosts, Rate: rate, Shaping: bed.Shaping, Streams: k, IOBytes: *rawIO,
				Bytes: *rawBytes, Load: load}
			var worst, user, sys, busy float64
			runs := 0
			for _, s := range ss {
				worst = max(worst, s.Seconds)
				user, sys, busy, runs = user+s.User, sys+s.Sys, busy+s.Busy, s.Runs
			}
			gb := float64(*rawBytes) * float64(runs*len(ss)) / 1e9 // sent by all hosts
			r.GBps = float64(*rawBytes) / worst / 1e9
			r.Link = r.GBps * 1e9 / bps
			r.UserPerGB, r.SysPerGB = user/gb, sys/gb
			r.CPUPerGB = r.UserPerGB + r.SysPerGB
			r.Busy = busy / float64(len(ss))
			rows = append(rows, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%-6s %7s %7s %8s %8s %6s %9s %9s %9s %6s %5s\n", "hosts", "rate", "streams", "io", "GB/s",
		"link", "cpu s/GB", "user s/GB", "sys s/GB", "busy", "load")
	for _, r := range rows {
		fmt.Printf("%-6d %7s %7d %8d %8.3f %6.2f %9.3f %9.3f %9.3f %6.2f %5.1f\n", r.Hosts, r.Rate, r.Streams,
			r.IOBytes, r.GBps, r.Link, r.CPUPerGB, r.UserPerGB, r.SysPerGB, r.Busy, r.Load)
	}
	fmt.Println("GB/s: per host, sent (and as much received at the same time); link: that over the shaped rate;")
	fmt.Println("cpu s/GB: the workers' getrusage user+sys per GB sent; busy: machine-wide busy cores (of 2) while timed")
	if len(rows) > 0 {
		fmt.Printf("links: %s\n", rows[0].Shaping)
	}
	prov.End()
	return prov.Save(os.Stdout, *out, benchutil.Rows[rawRow]{Provenance: prov, Units: units, Rows: rows})
}

// rawJob starts one raw worker per host and returns their samples.
func rawJob(ctx context.Context, bed *netbed.Bed, hosts, k, port int) ([]rawSample, error) {
	cmds := make([]*exec.Cmd, hosts)
	outs := make([]*bytes.Buffer, hosts)
	for h := range hosts {
		cmd := bed.Command(ctx, h, os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), rawWorkerEnv+"=1", "GP_NETBED_HOST="+strconv.Itoa(h),
			"GP_NETBED_LISTEN="+net.JoinHostPort(bed.Addr(h), strconv.Itoa(port)),
			"GP_NETBED_RIGHT="+net.JoinHostPort(bed.Addr((h+1)%hosts), strconv.Itoa(port)),
			"GP_NETBED_STREAMS="+strconv.Itoa(k))
		outs[h] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[h], outs[h]
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[h] = cmd
	}
	var errs []string
	for h, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("host %d: %v: %s", h, err, tail(outs[h].String(), 2000)))
		}
	}
	if errs != nil {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	var ss []rawSample
	for h := range hosts {
		for _, line := range strings.Split(outs[h].String(), "\n") {
			if js, ok := strings.CutPrefix(line, "RAW "); ok {
				var s rawSample
				if err := json.Unmarshal([]byte(js), &s); err != nil {
					return nil, err
				}
				ss = append(ss, s)
			}
		}
	}
	if len(ss) != hosts {
		return nil, fmt.Errorf("raw: %d samples from %d hosts", len(ss), hosts)
	}
	return ss, nil
}

// rawWorker connects k streams to the next host and accepts k from the previous one, then
// runs one warm-up and -reps timed runs, each sending and receiving -raw-bytes split over
// the streams, all at once.
func rawWorker() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	host, _ := strconv.Atoi(os.Getenv("GP_NETBED_HOST"))
	k, _ := strconv.Atoi(os.Getenv("GP_NETBED_STREAMS"))
	ln, err := net.Listen("tcp", os.Getenv("GP_NETBED_LISTEN"))
	if err != nil {
		return fmt.Errorf("raw worker %d: listen: %w", host, err)
	}
	defer ln.Close()
	in := make([]net.Conn, k)
	acc := make(chan error, 1)
	go func() {
		for i := range k {
			c, err := ln.Accept()
			if err != nil {
				acc <- err
				return
			}
			in[i] = c
		}
		acc <- nil
	}()
	out := make([]net.Conn, k)
	for i := range k {
		for {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", os.Getenv("GP_NETBED_RIGHT"))
			if err == nil {
				out[i] = c
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("raw worker %d: dial: %w", host, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case err := <-acc:
		if err != nil {
			return fmt.Errorf("raw worker %d: accept: %w", host, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("raw worker %d: accept: %w", host, ctx.Err())
	}
	defer func() {
		for i := range k {
			out[i].Close()
			in[i].Close()
		}
	}()
	for _, c := range append(append([]net.Conn(nil), in...), out...) {
		if err := tuneConn(c.(*net.TCPConn)); err != nil {
			return fmt.Errorf("raw worker %d: %w", host, err)
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		for i := range k {
			out[i].SetDeadline(deadline)
			in[i].SetDeadline(deadline)
		}
	}
	bufs := make([][]byte, 2*k)
	for i := range bufs {
		bufs[i] = make([]byte, *rawIO)
	}
	once := func() error {
		var wg sync.WaitGroup
		errs := make(chan error, 2*k)
		for i := range k {
			lo, hi := i**rawBytes/k, (i+1)**rawBytes/k
			wg.Add(2)
			go func() { // sender
				defer wg.Done()
				for n := hi - lo; n > 0; {
					m := min(n, len(bufs[2*i]))
					if _, err := out[i].Write(bufs[2*i][:m]); err != nil {
						errs <- err
						return
					}
					n -= m
				}
			}()
			go func() { // receiver
				defer wg.Done()
				for n := hi - lo; n > 0; {
					m, err := io.ReadFull(in[i], bufs[2*i+1][:min(n, len(bufs[2*i+1]))])
					if err != nil {
						errs <- err
						return
					}
					n -= m
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := once(); err != nil {
		return fmt.Errorf("raw worker %d: warm-up: %w", host, err)
	}
	user0, sys0 := cpuSeconds()
	busy0, total0 := procStat()
	secs := make([]float64, *reps)
	for i := range secs {
		start := time.Now()
		if err := once(); err != nil {
			return fmt.Errorf("raw worker %d: run %d: %w", host, i, err)
		}
		secs[i] = time.Since(start).Seconds()
	}
	busy1, total1 := procStat()
	user1, sys1 := cpuSeconds()
	s := rawSample{Host: host, Seconds: benchutil.Median(secs), Runs: *reps, User: user1 - user0, Sys: sys1 - sys0}
	if total1 > total0 {
		// jiffies are per core: busy cores = busy jiffies / (total jiffies / cores)
		s.Busy = float64(busy1-busy0) / float64(total1-total0) * float64(cores())
	}
	js, _ := json.Marshal(s)
	fmt.Println("RAW " + string(js))
	return nil
}

// tuneConn applies -raw-sockbuf and -raw-lowat to c.
func tuneConn(c *net.TCPConn) error {
	if *rawSockBuf > 0 {
		if err := c.SetReadBuffer(*rawSockBuf); err != nil {
			return fmt.Errorf("SO_RCVBUF: %w", err)
		}
		if err := c.SetWriteBuffer(*rawSockBuf); err != nil {
			return fmt.Errorf("SO_SNDBUF: %w", err)
		}
	}
	if *rawLowat <= 0 {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = setRcvLowat(fd, *rawLowat)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_RCVLOWAT: %w", serr)
	}
	return nil
}

// procStat is the machine's busy and total jiffies from /proc/stat's cpu line (busy: all
// but idle and iowait); zeros where it cannot be read.
func procStat() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total
}

// cores counts the cpuN lines of /proc/stat.
func cores() int {
	b, _ := os.ReadFile("/proc/stat")
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && len(l) > 3 && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return max(1, n)
}
