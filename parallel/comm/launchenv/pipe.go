package launchenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// PipeEnv names the environment variable through which a launcher (gprun, see
// parallel/launch) gives its workers the read end of a pipe that only the launcher writes
// to, as "FD,PID": the inherited descriptor (a handle on windows) and the launcher's pid.
// When the launcher dies, however it dies, the pipe's write end closes and the read end
// reports end of file: WatchLauncher turns that into the worker's exit. It is the portable
// complement of Linux's parent-death signal, which the launcher also sets.
const PipeEnv = "GP_LAUNCHER_PIPE"

var watchOnce sync.Once

// WatchLauncher makes this process exit (status 1, after a line on stderr) once the launcher
// that started it is gone, when PipeEnv describes a pipe from that launcher. It
// returns whether a watch runs; it does nothing (and returns false) when the variable is
// unset, malformed, or names a process other than this one's parent (the variable was
// inherited from further up, not meant for this process). It removes the variable from this
// process's environment, so that its own children do not act on it. comm.InitFromEnv calls it;
// workers that do not use comm.InitFromEnv may call it first thing in main. Calls after the first
// return the first's result.
func WatchLauncher() bool {
	started := false
	watchOnce.Do(func() { started = watchLauncher() })
	return started
}

func watchLauncher() bool {
	v, ok := os.LookupEnv(PipeEnv)
	if !ok {
		return false
	}
	os.Unsetenv(PipeEnv)
	fdText, pidText, ok := strings.Cut(v, ",")
	fd, err1 := strconv.ParseUint(fdText, 10, 64)
	pid, err2 := strconv.Atoi(pidText)
	if !ok || err1 != nil || err2 != nil || pid != os.Getppid() || !isPipe(uintptr(fd)) {
		return false
	}
	f := os.NewFile(uintptr(fd), "launcher pipe")
	go func() {
		var b [64]byte
		for {
			// The launcher never writes: any read that returns nothing means its end closed.
			if n, err := f.Read(b[:]); n == 0 || err != nil {
				fmt.Fprintf(os.Stderr, "launchenv: the launcher (pid %d) is gone; exiting\n", pid)
				os.Exit(1)
			}
		}
	}()
	return true
}
