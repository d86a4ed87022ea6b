//go:build linux

package launch

import "syscall"

// dieWithLauncher has the kernel SIGKILL the worker when the launcher dies (however it dies,
// SIGKILL included). Linux sends the parent-death signal when the thread that started the
// worker exits, not the process: runOnce therefore starts and waits for its workers on one
// locked OS thread, which lives until they have all exited.
func dieWithLauncher(a *syscall.SysProcAttr) { a.Pdeathsig = deathSignal }

// deathSignal is the parent-death signal (tests turn it off to check the launcher pipe alone).
var deathSignal = syscall.SIGKILL
