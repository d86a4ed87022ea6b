//go:build !unix && !windows

package launch

import (
	"os"
	"os/exec"
)

// inheritHandle is not supported here: workers get no launcher pipe.
func inheritHandle(*exec.Cmd, *os.File) (string, bool) { return "", false }
