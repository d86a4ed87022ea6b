//go:build linux

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests here run the job as a user types it: gprun (built from cmd/gprun) launching
// this package's command on 2 ranks. The test binary is the command: with testMainEnv set
// it runs main and exits, so the workers are the trainer's real main, flags and all.
const testMainEnv = "GP_IMAGENET_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(testMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var (
	gprunOnce sync.Once
	gprunPath string
	gprunErr  error
)

// gprun builds cmd/gprun once per test binary and returns its path.
func gprun(t *testing.T) string {
	t.Helper()
	gprunOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gp-imagenet-gprun")
		if err != nil {
			gprunErr = err
			return
		}
		gprunPath = filepath.Join(dir, "gprun")
		out, err := exec.Command("go", "build", "-o", gprunPath, "github.com/gorgonia-parallel/gp/cmd/gprun").CombinedOutput()
		if err != nil {
			gprunErr = fmt.Errorf("go build ./cmd/gprun: %v\n%s", err, out)
		}
	})
	if gprunErr != nil {
		t.Fatal(gprunErr)
	}
	return gprunPath
}

// line is one line of gprun's combined output and when the test read it.
type line struct {
	at   time.Time
	text string
}

// job is one gprun process with its 2 trainer workers. Every process of the job carries
// the environment variable GP_JOB_TEST=<id>, which is how the test finds leftovers.
type job struct {
	id    string
	cmd   *exec.Cmd
	start time.Time
	mu    sync.Mutex
	lines []line
	read  sync.WaitGroup
	done  chan struct{}
	err   error
	end   time.Time
}

// startJob starts gprun --nproc-per-node 2 -- <this binary as the trainer> args. The job
// and any process it left behind are killed when the test ends.
func startJob(t *testing.T, gprunArgs []string, args ...string) *job {
	t.Helper()
	var rnd [8]byte
	rand.Read(rnd[:])
	j := &job{id: hex.EncodeToString(rnd[:]), done: make(chan struct{})}
	full := append([]string{"--nproc-per-node", "2"}, gprunArgs...)
	full = append(full, "--", os.Args[0])
	j.cmd = exec.Command(gprun(t), append(full, args...)...)
	j.cmd.Env = append(os.Environ(), testMainEnv+"=1", "GP_JOB_TEST="+j.id, "OPENBLAS_NUM_THREADS=1")
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	j.cmd.Stderr = j.cmd.Stdout // one pipe: gprun's lines in the order it wrote them
	j.start = time.Now()
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j.read.Add(1)
	go func() {
		defer j.read.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			j.mu.Lock()
			j.lines = append(j.lines, line{time.Now(), sc.Text()})
			j.mu.Unlock()
		}
	}()
	go func() {
		j.read.Wait()
		j.err = j.cmd.Wait()
		j.end = time.Now()
		close(j.done)
	}()
	t.Cleanup(func() {
		j.cmd.Process.Kill()
		<-j.done
		for _, pid := range jobProcesses(j.id) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return j
}

// wait waits at most d for gprun to exit; it reports whether it did.
func (j *job) wait(d time.Duration) bool {
	select {
	case <-j.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (j *job) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var b strings.Builder
	for _, l := range j.lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// gprunLines are the lines gprun wrote itself, not the workers' (which it prefixes "[rankN]: ").
func (j *job) gprunLines() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, l := range j.lines {
		if !strings.HasPrefix(l.text, "[rank") {
			out = append(out, l.text)
		}
	}
	return out
}

// exitCode is gprun's exit code (-1 when a signal ended it).
func (j *job) exitCode() int {
	if j.cmd.ProcessState == nil {
		return -1
	}
	return j.cmd.ProcessState.ExitCode()
}

// jobProcesses lists the live processes whose environment holds GP_JOB_TEST=id (zombies
// have no readable environment, so they do not count: they run nothing).
func jobProcesses(id string) []int {
	ents, _ := os.ReadDir("/proc")
	marker := []byte("GP_JOB_TEST=" + id + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(b), string(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// shmFiles lists this project's shared-memory files (parallel/comm's "gp-comm-" prefix).
func shmFiles() map[string]bool {
	ents, _ := os.ReadDir("/dev/shm")
	m := map[string]bool{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "gp-comm-") {
			m[e.Name()] = true
		}
	}
	return m
}

// shmLeftBehind lists the shared-memory files that are not in before and whose creator (the
// pid in parallel/comm's name, gp-comm-<pid>-<random>) has exited. Once a job's processes are
// gone, a file of theirs is left behind; a file whose creator still runs belongs to another
// program, such as a test of another package that go test runs at the same time.
func shmLeftBehind(before map[string]bool) []string {
	var out []string
	for f := range shmFiles() {
		if before[f] {
			continue
		}
		pid, _, _ := strings.Cut(strings.TrimPrefix(f, "gp-comm-"), "-")
		if n, err := strconv.Atoi(pid); err == nil && n > 0 && unix.Kill(n, 0) != unix.ESRCH {
			continue
		}
		out = append(out, f)
	}
	return out
}

// watchFirst reports, on the returned channel, the time of the first inotify event in mask
// on path (a file, or a directory whose entries' names contain nameHas), or nothing when
// ctx ends first. It is how a test learns when a worker first touched the faulty file: the
// failure happens at or after that instant, so exit minus it is an upper bound on how long
// the job outlived its failure.
func watchFirst(ctx context.Context, t *testing.T, path string, mask uint32, nameHas string) <-chan time.Time {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, mask); err != nil {
		unix.Close(fd)
		t.Fatalf("inotify watch %s: %v", path, err)
	}
	ch := make(chan time.Time, 1)
	go func() {
		defer unix.Close(fd)
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			at := time.Now()
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if nameHas == "" || strings.Contains(name, nameHas) {
					ch <- at
					return
				}
			}
		}
	}()
	return ch
}

// A new file of an exited process is left behind; one of a running process is not, nor one
// that was there before.
func TestShmLeftBehind(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true command:", err)
	}
	dead := cmd.Process.Pid
	before := shmFiles()
	names := map[string]bool{
		fmt.Sprintf("gp-comm-%d-test%d", dead, os.Getpid()):        true,  // its creator exited
		fmt.Sprintf("gp-comm-%d-test%d", os.Getpid(), os.Getpid()): false, // its creator runs
	}
	for n := range names {
		if err := os.WriteFile(filepath.Join("/dev/shm", n), nil, 0o600); err != nil {
			t.Skip("/dev/shm not writable:", err)
		}
		defer os.Remove(filepath.Join("/dev/shm", n))
	}
	got := map[string]bool{}
	for _, f := range shmLeftBehind(before) {
		got[f] = true
	}
	for n, want := range names {
		if got[n] != want {
			t.Errorf("%s: left behind %v, want %v", n, got[n], want)
		}
	}
	if left := shmLeftBehind(shmFiles()); len(left) != 0 {
		t.Errorf("files there before counted as left behind: %v", left)
	}
}
