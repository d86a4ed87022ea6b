//go:build !unix

package launch

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup does nothing here: process groups (Setpgid) are a unix mechanism, so the
// worker stays in the launcher's group (on windows, its console's Ctrl-C reaches the workers
// too).
func ownProcessGroup(*exec.Cmd) {}

// signalWorker kills the worker process, whatever sig is: a process cannot be sent SIGINT
// or SIGTERM here (os.Process.Signal supports only os.Kill on windows), so a stop is
// immediate and Config.StopGrace does not apply.
func signalWorker(p *os.Process, _ syscall.Signal) error { return p.Kill() }

// inheritPipe makes the worker inherit r where the platform allows it (see inheritHandle)
// and returns how the worker names it.
func inheritPipe(cmd *exec.Cmd, r *os.File) (string, bool) { return inheritHandle(cmd, r) }
