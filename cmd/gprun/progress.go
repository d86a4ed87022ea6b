package main

import "io"

// progressTTYEnv names, in each worker's environment, the terminal that gprun's standard
// output is, when it is one. gprun copies the workers' output line by line with a rank
// prefix, so a progress bar redrawn with carriage returns would reach the terminal only as
// its last state at each line's end; a worker that draws one (the trainer's rank 0) draws
// it on this terminal instead, and writes whole lines to its output as before.
const progressTTYEnv = "GP_PROGRESS_TTY"

// progressEnv is the worker environment that tells the workers about gprun's terminal:
// progressTTYEnv=<its device> when stdout is a terminal, nothing otherwise (a pipe, a
// file, /dev/null).
func progressEnv(stdout io.Writer) []string {
	if path := terminalPath(stdout); path != "" {
		return []string{progressTTYEnv + "=" + path}
	}
	return nil
}
