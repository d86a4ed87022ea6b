//go:build !linux

// Command chaos is the fail-fast soak: it mounts a tmpfs, kills ranks with
// SIGKILL and watches /dev/shm, so it runs on Linux only (as root).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "chaos: the soak needs Linux (tmpfs mounts, SIGKILL, /dev/shm)")
	os.Exit(2)
}
