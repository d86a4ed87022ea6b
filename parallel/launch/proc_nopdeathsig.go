//go:build unix && !linux

package launch

import "syscall"

// dieWithLauncher does nothing here: there is no parent-death signal outside Linux. The
// launcher pipe (launchenv.PipeEnv) ends workers that watch it instead.
func dieWithLauncher(*syscall.SysProcAttr) {}
