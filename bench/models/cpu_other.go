//go:build !unix

package main

// cpuSeconds is 0 where getrusage is missing; the CPU column then reads 0.
func cpuSeconds() float64 { return 0 }
