package main

import "errors"

// cpuSeconds is 0, 0 on Windows (no getrusage; the bed needs Linux anyway).
func cpuSeconds() (user, sys float64) { return 0, 0 }

// setRcvLowat is refused on Windows.
func setRcvLowat(fd uintptr, n int) error { return errors.New("SO_RCVLOWAT: not on Windows") }
