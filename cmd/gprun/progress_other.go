//go:build !linux

package main

import "io"

// terminalPath reports no terminal where gprun cannot tell (the workers print lines).
func terminalPath(io.Writer) string { return "" }
