//go:build windows

package launch

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// inheritHandle makes the worker inherit r's handle (marked inheritable, and listed so that
// only this worker inherits it) and returns the handle's value, which the worker shares.
func inheritHandle(cmd *exec.Cmd, r *os.File) (string, bool) {
	h := syscall.Handle(r.Fd())
	if err := syscall.SetHandleInformation(h, syscall.HANDLE_FLAG_INHERIT, syscall.HANDLE_FLAG_INHERIT); err != nil {
		return "", false
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.AdditionalInheritedHandles = append(cmd.SysProcAttr.AdditionalInheritedHandles, h)
	return strconv.FormatUint(uint64(h), 10), true
}
