//go:build unix

package launchenv

import "syscall"

// isPipe reports whether fd is an open pipe (so that a stale PipeEnv never makes
// WatchLauncher read from an unrelated descriptor).
func isPipe(fd uintptr) bool {
	var st syscall.Stat_t
	return syscall.Fstat(int(fd), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}
