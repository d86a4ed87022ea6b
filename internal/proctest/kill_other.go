//go:build !unix

package proctest

import "os"

// KillSelf ends this process at once, as a crashed rank would: there is no SIGKILL here,
// so the process is killed through os.Process.Kill (TerminateProcess on windows), or, if
// that fails, exits with status 137 (what a shell reports for SIGKILL) without running
// deferred calls.
func KillSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	os.Exit(137)
}
