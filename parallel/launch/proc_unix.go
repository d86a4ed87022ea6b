//go:build unix

package launch

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// ownProcessGroup puts the worker in its own process group, so that a terminal's Ctrl-C
// reaches only the launcher, which forwards it; on Linux the worker also gets SIGKILL when
// the launcher dies (see dieWithLauncher).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithLauncher(cmd.SysProcAttr)
}

// signalWorker delivers sig to the worker process.
func signalWorker(p *os.Process, sig syscall.Signal) error { return p.Signal(sig) }

// inheritPipe makes the worker inherit r (as the descriptor after its standard ones and any
// earlier extra files) and returns the descriptor's number as the worker sees it.
func inheritPipe(cmd *exec.Cmd, r *os.File) (string, bool) {
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	return strconv.Itoa(2 + len(cmd.ExtraFiles)), true
}
