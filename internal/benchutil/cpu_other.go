//go:build !unix

package benchutil

// CPUSeconds is 0 where getrusage is missing; CPU columns then read 0.
func CPUSeconds() float64 { return 0 }
