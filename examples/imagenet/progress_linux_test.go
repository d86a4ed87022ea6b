//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A job launched by gprun on a terminal (a pseudo-terminal here) shows rank 0's progress
// bar redrawn in place on that terminal, as the README promises for make demo, and no
// per-print-freq lines; TestConsoleThroughGprunIsWholeLines is the same job on a pipe.
func TestProgressBarThroughGprunOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a 2-rank job")
	}
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(gprun(t), "--nproc-per-node", "2", "--", os.Args[0], "-data-format", "synthetic",
		"-data", filepath.Join(t.TempDir(), "data"), "-synthetic-classes", "2", "-synthetic-train", "16", "-synthetic-val", "4",
		"-synthetic-size", "16", "-arch", "resnet8", "-image-size", "16", "-b", "8", "-j", "1", "-resume", "none",
		"-epochs", "1", "-print-freq", "1", "-out", out)
	cmd.Env = append(os.Environ(), testMainEnv+"=1", "OPENBLAS_NUM_THREADS=1")
	cmd.Stdout, cmd.Stderr = tty, tty
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		io.Copy(&screen, master) // ends with EIO once no process holds the terminal
		close(read)
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("job did not end within 3 min")
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
	}
	text := screen.String()
	t.Logf("terminal:\n%q", text)
	if err != nil {
		t.Fatalf("gprun: %v", err)
	}
	// The bar is drawn at the epoch's start and redrawn in place (at most every 200 ms, and
	// at its end), each time after a carriage return, ending full.
	if draws := strings.Count(text, "\repoch 1/1  loss"); draws < 2 || !strings.Contains(text, "(4/4)") {
		t.Errorf("the bar was drawn %d times (want at least 2, the last full at 4/4)", draws)
	}
	if strings.Contains(text, "[rank0]: epoch 1/1  [") {
		t.Errorf("per-print-freq lines on a terminal, where the bar shows the steps")
	}
	if !strings.Contains(text, "[rank0]: summary: 4 steps") {
		t.Errorf("no summary")
	}
}
