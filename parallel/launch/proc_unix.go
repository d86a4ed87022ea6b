//go:build unix

package launch

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup puts the worker in its own process group, so that a terminal's Ctrl-C
// reaches only the launcher, which forwards it.
func ownProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// signalWorker delivers sig to the worker process.
func signalWorker(p *os.Process, sig syscall.Signal) error { return p.Signal(sig) }
