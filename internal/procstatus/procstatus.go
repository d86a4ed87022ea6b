// Package procstatus reads this process's memory figures from Linux's /proc/self/status.
package procstatus

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Bytes reads a field given in kB ("VmRSS": resident now, "VmHWM": the resident peak) of
// /proc/self/status, in bytes. Where there is no /proc (not Linux) it returns the open
// error, which wraps fs.ErrNotExist; a field missing or not a number is an error naming it.
func Bytes(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("procstatus: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		num := strings.TrimSuffix(strings.TrimSpace(v), " kB")
		kb, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstatus: /proc/self/status %s=%q: %w", field, v, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("procstatus: reading /proc/self/status: %w", err)
	}
	return 0, fmt.Errorf("procstatus: /proc/self/status has no %s", field)
}
