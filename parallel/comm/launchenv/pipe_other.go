//go:build !unix

package launchenv

// isPipe cannot check the descriptor's kind here; the pid in PipeEnv, which must be
// this process's parent, guards against a stale variable.
func isPipe(fd uintptr) bool { return fd != 0 }
