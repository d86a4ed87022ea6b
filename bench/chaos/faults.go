//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorgonia-parallel/gp/data/synth"
	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/nn"
	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// job is one gprun process and its workers, all marked GP_CHAOS_JOB=<id> in their
// environment.
type job struct {
	id       string
	cmd      *exec.Cmd
	start    time.Time
	done     chan struct{}
	took     time.Duration
	exitCode int
	out      benchutil.Output // gprun's and the workers' output
}

func (j *job) output() string { return j.out.String() }

// startJob starts the soak's job: 2 ranks of DDP resnet18 on 16x16 images, cfg.Steps steps
// with a checkpoint every cfg.CkptEvery, resuming automatically from the latest checkpoint in
// out after each of gprun's restarts.
func startJob(b binaries, dataDir, out string, cfg config) *job {
	var rnd [8]byte
	rand.Read(rnd[:])
	j := &job{id: hex.EncodeToString(rnd[:]), done: make(chan struct{})}
	j.cmd = exec.Command(b.gprun, "--nproc-per-node", "2", "--max-restarts", strconv.Itoa(cfg.MaxRestarts), "--",
		b.imagenet, "-data", dataDir, "-data-format", "webdataset", "-num-classes", "4", "-arch", "resnet18",
		"-image-size", "16", "-b", "8", "-j", "2", "-lr", "0.05", "-seed", "5", "-epochs", "100",
		"-max-steps", strconv.Itoa(cfg.Steps), "-ckpt-every", strconv.Itoa(cfg.CkptEvery), "-keep", "2",
		"-resume", "auto", "-quiet", "-print-freq", "1", "-timeout", "60s", "-out", out)
	j.cmd.Env = append(os.Environ(), "GP_CHAOS_JOB="+j.id, "OPENBLAS_NUM_THREADS=1")
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	j.start = time.Now()
	if err := j.cmd.Start(); err != nil {
		fmt.Fprintf(&j.out, "chaos: starting gprun: %v\n", err)
		j.exitCode = -1
		close(j.done)
		return j
	}
	go func() {
		j.cmd.Wait()
		j.took = time.Since(j.start)
		j.exitCode = j.cmd.ProcessState.ExitCode()
		close(j.done)
	}()
	return j
}

func (j *job) wait(d time.Duration) bool {
	select {
	case <-j.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends a hung job: gprun (its workers die with it), then anything still marked.
func (j *job) kill() {
	if j.cmd.Process != nil {
		j.cmd.Process.Kill()
	}
	j.wait(10 * time.Second)
	for _, pid := range jobProcesses(j.id) {
		killPID(pid)
	}
}

// workerPID is the process id of the job's worker of this rank, or 0.
func (j *job) workerPID(rank int) int {
	for _, pid := range jobProcesses(j.id) {
		if env := environ(pid); env["RANK"] == strconv.Itoa(rank) {
			return pid
		}
	}
	return 0
}

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// environ reads a process's environment (empty for a zombie or a process gone).
func environ(pid int) map[string]string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// jobProcesses lists the live processes of job id (zombies have no environment and run
// nothing, so they do not count).
func jobProcesses(id string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if environ(pid)["GP_CHAOS_JOB"] == id {
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

// mountTmpfs mounts a tmpfs of mib MiB on dir (created) and returns its unmount.
func mountTmpfs(dir string, mib int) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", mib), "tmpfs", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mounting a tmpfs on %s (needs root): %v: %s", dir, err, bytes.TrimSpace(out))
	}
	return func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: unmounting %s: %v\n", dir, err)
		}
	}, nil
}

// fillDisk fills the file system holding dir with one junk file and returns its size and
// the function that removes it.
func fillDisk(dir string) (int64, func(), error) {
	junk := filepath.Join(dir, "junk")
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, func() {}, err
	}
	free := int64(st.Bavail) * st.Bsize
	f, err := os.Create(junk)
	if err != nil {
		return 0, func() {}, err
	}
	defer f.Close()
	remove := func() { os.Remove(junk) }
	for n := free; n > 0; n -= 1 << 20 {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err == nil {
			return n, remove, nil
		}
	}
	return 0, remove, fmt.Errorf("fallocate in %s failed", dir)
}

// corruptShard damages shard in place (a reader that has it open sees the damage):
// truncated inside its second half, or overwritten with random bytes of its length. The
// returned function restores the original bytes, atomically (a new file renamed over it).
func corruptShard(shard string, truncate bool, rng *mrand.Rand) (func() error, error) {
	orig, err := os.ReadFile(shard)
	if err != nil {
		return func() error { return nil }, err
	}
	restore := func() error {
		tmp := shard + ".restore"
		if err := os.WriteFile(tmp, orig, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, shard)
	}
	bad := make([]byte, len(orig))
	if truncate {
		bad = orig[:len(orig)/2+rng.IntN(len(orig)/2)]
	} else {
		rand.Read(bad)
	}
	f, err := os.OpenFile(shard, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return restore, err
	}
	_, err = f.Write(bad)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return restore, err
}

// writeShards writes a 4-class generated data set (24 training and 8 validation 20x20
// images per class) as WebDataset shards dir/{train,val}-00000{0,1}.tar, sample i in shard
// i%2: one training shard per rank.
func writeShards(dir string) error {
	src := dir + "-folder"
	if err := synth.WriteSplit(src, 4, 24, 8, 20, 3); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, side := range []string{"train", "val"} {
		var paths []string
		err := fs.WalkDir(os.DirFS(filepath.Join(src, side)), ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				paths = append(paths, p)
			}
			return err
		})
		if err != nil {
			return err
		}
		sort.Strings(paths)
		for shard := 0; shard < 2; shard++ {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for i := shard; i < len(paths); i += 2 {
				img, err := os.ReadFile(filepath.Join(src, side, paths[i]))
				if err != nil {
					return err
				}
				var class int
				fmt.Sscanf(filepath.Dir(paths[i]), "class_%d", &class)
				key := fmt.Sprintf("s%05d", i)
				for _, m := range []struct {
					name string
					data []byte
				}{{key + ".jpg", img}, {key + ".cls", []byte(strconv.Itoa(class))}} {
					if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data))}); err != nil {
						return err
					}
					tw.Write(m.data)
				}
			}
			if err := tw.Close(); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%06d.tar", side, shard)), b.Bytes(), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// compareFinal compares every entry of the final checkpoint (ckpt-<steps>.npz) of two runs
// bit for bit; it returns "" when they are equal, else the first difference.
func compareFinal(wantDir, gotDir string, steps int) (string, error) {
	name := fmt.Sprintf("ckpt-%09d.npz", steps)
	want, err := checkpoint.Load(filepath.Join(wantDir, name))
	if err != nil {
		return "", fmt.Errorf("the reference's final checkpoint: %w", err)
	}
	got, err := checkpoint.Load(filepath.Join(gotDir, name))
	if err != nil {
		return "", fmt.Errorf("final checkpoint: %w", err)
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%s: %d entries, the clean run's %d", name, len(got), len(want)), nil
	}
	for i, w := range want {
		g := got[i]
		if w.Name != g.Name || !slices.Equal(w.Shape, g.Shape) || len(w.F32) != len(g.F32) ||
			len(w.F64) != len(g.F64) || len(w.I64) != len(g.I64) {
			return fmt.Sprintf("entry %d: %s %v, the clean run's %s %v", i, g.Name, g.Shape, w.Name, w.Shape), nil
		}
		if !sameBits(w, g) {
			return fmt.Sprintf("%s differs from the clean run's", w.Name), nil
		}
	}
	return "", nil
}

// sameBits reports whether a and b hold the same values bit for bit.
func sameBits(a, b nn.StateEntry) bool {
	for k := range a.F32 {
		if math.Float32bits(a.F32[k]) != math.Float32bits(b.F32[k]) {
			return false
		}
	}
	for k := range a.F64 {
		if math.Float64bits(a.F64[k]) != math.Float64bits(b.F64[k]) {
			return false
		}
	}
	return slices.Equal(a.I64, b.I64)
}

// checkOut lists what a job left half-written in out: checkpoint.WriteFile temporaries
// (".NAME.tmp-*") and checkpoints that do not load.
func checkOut(out string) (temps, bad []string) {
	filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			temps = append(temps, name)
		}
		if strings.HasPrefix(name, "ckpt-") && strings.HasSuffix(name, ".npz") {
			if _, err := checkpoint.Load(p); err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", name, err))
			}
		}
		return nil
	})
	return temps, bad
}
