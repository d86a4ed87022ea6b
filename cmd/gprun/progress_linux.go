package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// terminalPath is the device path of w when w is a terminal ("/dev/pts/3"), else "".
func terminalPath(w io.Writer) string {
	f, ok := w.(*os.File)
	if !ok {
		return ""
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return "" // not a terminal
	}
	path, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !strings.HasPrefix(path, "/dev/") {
		return "/dev/tty"
	}
	return path
}
