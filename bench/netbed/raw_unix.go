//go:build !windows

package main

import "syscall"

// cpuSeconds is this process's user and system CPU time so far (getrusage).
func cpuSeconds() (user, sys float64) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime), tv(ru.Stime)
}

// setRcvLowat sets SO_RCVLOWAT on the socket fd.
func setRcvLowat(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
}
