package main

import (
	"io"

	"github.com/gorgonia-parallel/gp/parallel/launch"
)

// progressTTYEnv is launch.ProgressTTYEnv: the terminal gprun's standard output is, named
// to the workers so that a progress bar is drawn there rather than through gprun's
// line-by-line copy of their output.
const progressTTYEnv = launch.ProgressTTYEnv

// progressEnv is the worker environment that tells the workers about gprun's terminal:
// progressTTYEnv=<its device> when stdout is a terminal, nothing otherwise (a pipe, a
// file, /dev/null).
func progressEnv(stdout io.Writer) []string {
	if path := terminalPath(stdout); path != "" {
		return []string{progressTTYEnv + "=" + path}
	}
	return nil
}
