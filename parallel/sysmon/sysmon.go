// Package sysmon lowers the scheduling priority of the Go runtime's monitor thread (sysmon)
// in a process that shares the machine's cores with other compute processes: the ranks of
// a job on one host.
//
// A program that a launcher (gprun, torchrun, srun, mpirun) starts as one of several ranks
// calls [Lower] once, first thing in main, before it builds its process group:
//
//	if _, err := sysmon.Lower(); err != nil {
//		log.Fatal(err) // GP_SYSMON holds no mode
//	}
//
// comm.InitFromEnv does not do it: it is a building block of programs, libraries and tests
// alike, and the process's threads belong to whoever sets the process up. The two entry
// points that join a job on a program's behalf, ddp.NewSolver and trainer's Fit without
// WithGroup, are that set-up, and call Lower when the job has several ranks. A process
// started alone gains nothing from it: its monitor's wake-ups land on idle cores (bench/ddp
// lowers its single-process baseline anyway, so that both sides of its comparison run
// alike).
//
// Note [The monitor thread and cgo]: sysmon takes the P of a goroutine that has stayed in a
// cgo call for one of its ticks, when no other P is idle, and hands it to another thread;
// having taken one, it polls again after 20 µs. A training step calls C (OpenBLAS, the SIMD
// kernels) thousands of times, so with one P per rank sysmon wakes thousands of times a
// second and each hand-off wakes another thread as well. Where a process has spare cores
// (one plain process on a 2-core machine) the wake-ups land on them and cost the
// compute nothing. Where every core runs a rank (DDP at one rank per core), each wake-up
// preempts some rank's compute: measured with bench/ddp on 2 cores, each rank's sysmon ran
// 0.3 s of every 8 and waited 4 s more for a core, its compute threads waited 1.3-2.3 s of
// every 8 for a core, and DDP's images/s were 6-10% lower than with sysmon lowered.
//
// Lowered to SCHED_IDLE, sysmon runs only when a core would otherwise be idle: it still
// retakes Ps, preempts long-running goroutines and polls the network whenever a rank waits
// (at every synchronisation of every step), but no longer takes cores from the compute.
// A thread sysmon starts inherits its priority, so a watcher restores the normal priority
// of every thread that appears with the lowered one. On a machine loaded far beyond its
// cores, a SCHED_IDLE sysmon would hardly run at all, which costs far more than its
// wake-ups: the watcher gives it its normal priority back while that lasts (see Note
// [Lowered only while the cores suffice] in sysmon_linux.go).
package sysmon

import (
	"fmt"
	"os"
	"sync"
)

// Env names the variable that chooses what Lower does: "idle" (the default: SCHED_IDLE),
// "nice" (nice 19: sysmon keeps a small share of a busy core) or "default" (nothing).
const Env = "GP_SYSMON"

// Mode is what Lower does to the monitor thread.
type Mode string

// The modes Env may name.
const (
	Idle    Mode = "idle"
	Nice    Mode = "nice"
	Default Mode = "default"
)

// ModeFromEnv reads Env: Idle when unset or empty, an error naming the variable when it
// holds anything but a Mode.
func ModeFromEnv() (Mode, error) {
	switch v := os.Getenv(Env); Mode(v) {
	case "":
		return Idle, nil
	case Idle, Nice, Default:
		return Mode(v), nil
	default:
		return "", fmt.Errorf("%s=%q: want %q, %q or %q", Env, v, Idle, Nice, Default)
	}
}

// Result says what Lower did.
type Result struct {
	// Thread is the monitor thread's id, 0 when it was not found (or the mode is Default,
	// or the OS has no such threads).
	Thread int
	// Mode is the mode applied; Default when nothing was changed.
	Mode Mode
	// Reason says why nothing was changed when the mode asked for a change ("" otherwise).
	Reason string
}

// Lower applies the mode Env names to this process's monitor thread, once per process
// (later calls return the first call's result); call it from main, early (see the package
// doc). It returns an error only when Env holds no
// Mode. Lowering is a tuning, never a condition of running: when the thread cannot be told
// apart from the others, /proc cannot be read or the priority cannot be changed, Lower
// changes nothing and says why in Result.Reason. Only Linux has threads to change:
// elsewhere Lower does nothing. It takes 30 ms to 1 s: it watches the threads until the
// monitor stands out. Once it has lowered the thread, it leaves a goroutine that reads this
// process's threads in /proc every 100 ms for the life of the process (the watcher of the
// Notes).
func Lower() (Result, error) {
	once.Do(func() {
		m, err := ModeFromEnv()
		if err != nil {
			lowered.err = err
			return
		}
		lowered.res = lower(m)
	})
	return lowered.res, lowered.err
}

// once and lowered make Lower act once per process.
var (
	once    sync.Once
	lowered struct {
		res Result
		err error
	}
)
