//go:build !linux

package driver

// threadID has no thread id to give outside Linux: the context is set at every call.
func threadID() (int, bool) { return 0, false }
