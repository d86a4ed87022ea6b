//go:build linux

package launch

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() { testLauncher = orphanLauncher }

// orphanLauncher is the test binary as a launcher of two "orphan" workers; the test
// SIGKILLs it. GP_LAUNCH_TEST_NO_PDEATHSIG turns the parent-death signal off, so that only
// the launcher pipe can end the workers.
func orphanLauncher() int {
	if os.Getenv("GP_LAUNCH_TEST_NO_PDEATHSIG") != "" {
		deathSignal = 0
	}
	err := Run(context.Background(), Config{NProcPerNode: 2, Program: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{"GP_LAUNCH_TEST_WORKER=orphan", "WATCH=" + os.Getenv("GP_LAUNCH_TEST_WATCH")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A SIGKILLed launcher leaves no worker behind after 5 s: through the parent-death signal,
// through the launcher pipe alone, and (the control) not without either.
func TestWorkersDieWithLauncher(t *testing.T) {
	for _, tc := range []struct {
		name               string
		noPdeathsig, watch bool
		wantDead           bool
	}{
		{"pdeathsig", false, false, true},
		{"pipe", true, true, true},
		{"control", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "GP_LAUNCH_TEST_LAUNCHER=1")
			if tc.noPdeathsig {
				cmd.Env = append(cmd.Env, "GP_LAUNCH_TEST_NO_PDEATHSIG=1")
			}
			if tc.watch {
				cmd.Env = append(cmd.Env, "GP_LAUNCH_TEST_WATCH=1")
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pids := make(chan int, 2)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					var rank, pid int
					if _, err := fmt.Sscanf(sc.Text(), "[rank%d]: pid %d", &rank, &pid); err == nil {
						pids <- pid
					}
				}
			}()
			var ws []int
			for len(ws) < 2 {
				select {
				case pid := <-pids:
					ws = append(ws, pid)
				case <-time.After(20 * time.Second):
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatal("the workers did not start")
				}
			}
			// Whatever happens, no worker outlives the test.
			t.Cleanup(func() {
				for _, pid := range ws {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			cmd.Process.Kill()
			cmd.Wait()
			killed := time.Now()
			deadline := killed.Add(5 * time.Second)
			if !tc.wantDead {
				deadline = killed.Add(time.Second)
			}
			for time.Now().Before(deadline) && (alive(ws[0]) || alive(ws[1])) {
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(killed)
			for r, pid := range ws {
				if alive(pid) == tc.wantDead {
					t.Errorf("worker %d (pid %d) alive=%v %v after its launcher was killed", r, pid, alive(pid), took.Round(time.Millisecond))
				}
			}
			if tc.wantDead {
				t.Logf("both workers gone %v after the launcher's SIGKILL", took.Round(time.Millisecond))
			}
		})
	}
}

// alive reports whether process pid exists and is not a zombie (an orphan's zombie lasts
// until its new parent reaps it, which may never happen in a container).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z' && s[i+2] != 'X'
}
