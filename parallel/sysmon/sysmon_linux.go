//go:build linux

package sysmon

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// find looks at every thread's current system call over and over, for at least findMin and
// at most findMax: until one thread stands out, which takes findMin on an idle machine.
const (
	findMin = 30 * time.Millisecond
	findMax = time.Second
)

// watchEvery is how often the watcher looks for threads that inherited the lowered priority.
const watchEvery = 100 * time.Millisecond

// priority is a thread's scheduling policy and nice value.
type priority struct {
	policy uint32
	nice   int32
}

func lower(m Mode) Result {
	none := func(why string, args ...any) Result {
		return Result{Mode: Default, Reason: fmt.Sprintf(why, args...)}
	}
	if m == Default {
		return Result{Mode: Default}
	}
	tid, err := find()
	if err != nil {
		return none("%v", err)
	}
	if tid == 0 {
		return none("no thread sleeps in nanosleep often enough to be the runtime's monitor")
	}
	normal, err := priorityOf(tid)
	if err != nil {
		return none("reading thread %d's priority: %v", tid, err)
	}
	low := normal
	if m == Idle {
		low.policy = unix.SCHED_IDLE
	} else {
		low.nice = 19
	}
	if err := setPriority(tid, low); err != nil {
		return none("lowering thread %d to %s: %v", tid, m, err)
	}
	go watch(tid, normal, low)
	return Result{Thread: tid, Mode: m}
}

// find returns the thread found sleeping in nanosleep in the most of find's looks (see
// standsOut), 0 when no thread stands out within findMax.
// Go's runtime sleeps there only in sysmon's polling loop and, for a few microseconds, in a
// thread that steals work from a running P. find keeps the looks back to back on this
// goroutine: a P stays busy, so sysmon polls (it parks on a futex when every P is idle, and
// the looks' system calls wake it), and nothing is made runnable, so no thread looks for
// work meanwhile. Where every core is busy, a freshly woken sysmon polls every 20 µs and
// spends most of each poll waiting for a core, so it stands out only once its polls have
// lengthened: 30-470 ms with four busy loops on 2 cores.
func find() (int, error) {
	nanosleep := strconv.Itoa(unix.SYS_NANOSLEEP)
	counts := map[int]int{}
	looks := 0
	for start := time.Now(); ; looks++ {
		if d := time.Since(start); d >= findMin {
			if t := standsOut(counts, looks); t != 0 || d >= findMax {
				return t, nil
			}
		}
		tids, err := threads()
		if err != nil {
			return 0, err
		}
		for _, t := range tids {
			b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(t) + "/syscall")
			if err != nil {
				continue // exited, or /proc/*/syscall is not readable here
			}
			if f := strings.Fields(string(b)); len(f) > 0 && f[0] == nanosleep {
				counts[t]++
			}
		}
	}
}

// standsOut returns the thread seen in nanosleep in at least 10 looks and a quarter of all,
// and twice as often as any other; 0 if none.
func standsOut(counts map[int]int, looks int) int {
	best, bestN, secondN := 0, 0, 0
	for t, n := range counts {
		switch {
		case n > bestN:
			best, bestN, secondN = t, n, bestN
		case n > secondN:
			secondN = n
		}
	}
	if bestN < 10 || bestN < looks/4 || 2*secondN > bestN {
		return 0
	}
	return best
}

// threads lists this process's thread ids.
func threads() ([]int, error) {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("sysmon: listing threads: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("sysmon: listing threads: %w", err)
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if t, err := strconv.Atoi(n); err == nil {
			tids = append(tids, t)
		}
	}
	return tids, nil
}

func priorityOf(tid int) (priority, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return priority{}, err
	}
	return priority{policy: a.Policy, nice: a.Nice}, nil
}

func setPriority(tid int, p priority) error {
	a := unix.SchedAttr{Size: uint32(unsafe.Sizeof(unix.SchedAttr{})), Policy: p.policy, Nice: p.nice}
	return unix.SchedSetAttr(tid, &a, 0)
}

// watch gives the normal priority back to every thread but mon that has the lowered one:
// a thread sysmon creates (to run a P it retook) inherits sysmon's priority. Looking at
// every thread each time costs a system call per thread, a few dozen a second. It also
// follows the machine's load (see Note [Lowered only while the cores suffice]): sysmon gets
// its normal priority back while the machine runs far more threads than it has cores, and
// is lowered again when the load falls.
func watch(mon int, normal, low priority) {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	cores, own := runtime.NumCPU(), ownThreads()
	load := float64(cores) // runnable threads, smoothed over about a second
	isLow := true
	for range tick.C {
		if r, ok := runnable(); ok {
			load += (float64(max(r-own, 0)) - load) * loadSmoothing
		}
		if want := keepLowered(isLow, load, cores); want != isLow {
			p := normal
			if want {
				p = low
			}
			if setPriority(mon, p) == nil {
				isLow = want
			}
		}
		if !isLow {
			continue // threads sysmon starts now inherit the normal priority
		}
		tids, err := threads()
		if err != nil {
			return
		}
		for _, t := range tids {
			if t == mon {
				continue
			}
			if p, err := priorityOf(t); err == nil && p == low {
				setPriority(t, normal)
			}
		}
	}
}

// Note [Lowered only while the cores suffice]: a SCHED_IDLE thread runs only when nothing
// else wants the core. Where the ranks have the cores to themselves, that is whenever a rank
// waits, which is often enough. On a machine loaded far beyond its cores (other jobs, a
// test suite), sysmon then hardly runs at all: a P held by a goroutine in a long C call is
// not handed to the communication goroutines, and a rank's step waits. Measured on 2 cores
// at load 13 (the demo's job for one epoch): 311 s with sysmon lowered against 175 s
// without. So the watcher smooths the number of runnable threads (procs_running in
// /proc/loadavg) and gives sysmon its priority back above overloaded × cores, lowering it
// again below lowerBelow × cores (the gap keeps it from flapping). The count leaves out the
// job's own waiting (ownThreads): the thread reading /proc/loadavg, and each local rank's
// monitor, which is runnable whenever it polls and the cores are busy, lowered or not. Left
// in, one rank per core on an otherwise idle machine counted about 2 × cores (the ranks
// plus their monitors), so a passing extra thread restored sysmon and it was never lowered
// again (bench/ddp, world 2 on 2 cores: procs_running 3-7 during the run, the monitors at
// normal priority waiting 0.7-0.9 of the time).
const (
	overloaded    = 2.0
	lowerBelow    = 1.5
	loadSmoothing = 0.1 // per watchEvery tick: a time constant of about a second
)

// keepLowered says whether sysmon should be (or stay) lowered, given whether it is now and
// the smoothed number of runnable threads on the machine.
func keepLowered(isLow bool, load float64, cores int) bool {
	if isLow {
		return load <= overloaded*float64(cores)
	}
	return load < lowerBelow*float64(cores)
}

// ownThreads is how many of the machine's runnable threads the watcher discounts as the
// job's own waiting rather than load (Note [Lowered only while the cores suffice]): the
// thread reading /proc/loadavg, and one monitor per rank on this host (LOCAL_WORLD_SIZE,
// as launchers set it; one, this process's, without it).
func ownThreads() int {
	ranks, err := strconv.Atoi(os.Getenv("LOCAL_WORLD_SIZE"))
	if err != nil || ranks < 1 {
		ranks = 1
	}
	return 1 + ranks
}

// runnable is the number of threads running or ready to run on the machine (the fourth
// field of /proc/loadavg, "running/total").
func runnable() (int, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	return parseRunnable(string(b))
}

func parseRunnable(loadavg string) (int, bool) {
	f := strings.Fields(loadavg)
	if len(f) < 4 {
		return 0, false
	}
	run, _, ok := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(run)
	return n, ok && err == nil && n >= 0
}
