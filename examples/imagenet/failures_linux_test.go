//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/data/synth"
	"golang.org/x/sys/unix"
)

// failureCase is one failure that a 2-rank job must end on at once rather than wait for
// the collective timeout (30 min): setup makes the data and -out, breaks
// one thing, and says which file the workers touch first when they meet it (watch; "" for
// a failure at start-up).
type failureCase struct {
	name   string
	format string
	// setup returns the -data folder, the -out folder, the watched path, the inotify mask
	// and name filter of the event that marks the failure (see watchFirst).
	setup func(t *testing.T) (data, out, watch string, mask uint32, nameHas string)
	// rank is the rank that must be reported (-1: whichever reads the bad sample first).
	rank int
	// cause and reason must both appear in gprun's one failure report: what broke (a file
	// name) and why.
	cause, reason string
	extra         []string // more trainer flags
}

// TestJobEndsOnFailure: every failure of its table, in a real 2-rank job
// (gprun and the trainer's main), ends the whole job within 10 s of the failure; gprun exits
// non-zero, prints one report naming the rank, the file and the reason, and leaves no
// worker and no shared-memory file behind.
//
// The time of the failure is the first moment a worker touched the faulty file, as inotify
// reports it (the failure follows it, so the measured time to exit is an upper bound), or
// gprun's start for failures at start-up.
func TestJobEndsOnFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("launches 2-rank jobs")
	}
	cases := []failureCase{
		{name: "jpeg-truncated", format: "imagefolder", rank: -1, cause: "class_001/00005.jpg", reason: "unexpected EOF",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := folderCopy(t)
				p := filepath.Join(d, "train", "class_001", "00005.jpg")
				b, _ := os.ReadFile(p)
				writeFile(t, p, b[:len(b)/2])
				return d, filepath.Join(t.TempDir(), "run"), p, unix.IN_OPEN, ""
			}},
		{name: "jpeg-empty", format: "imagefolder", rank: -1, cause: "class_002/00007.jpg", reason: "zero-byte file",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := folderCopy(t)
				p := filepath.Join(d, "train", "class_002", "00007.jpg")
				writeFile(t, p, nil)
				return d, filepath.Join(t.TempDir(), "run"), p, unix.IN_OPEN, ""
			}},
		{name: "jpeg-random-bytes", format: "imagefolder", rank: -1, cause: "class_003/00011.jpg", reason: "corrupt",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := folderCopy(t)
				p := filepath.Join(d, "train", "class_003", "00011.jpg")
				b := make([]byte, 3000)
				rand.Read(b)
				writeFile(t, p, b)
				return d, filepath.Join(t.TempDir(), "run"), p, unix.IN_OPEN, ""
			}},
		{name: "wds-truncated", format: "webdataset", rank: 1, cause: "train-000001.tar", reason: "truncated",
			extra: []string{"-num-classes", "4"},
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := shardsOf(t)
				p := filepath.Join(d, "train-000001.tar")
				b, _ := os.ReadFile(p)
				writeFile(t, p, b[:len(b)/2+100]) // inside a member
				return d, filepath.Join(t.TempDir(), "run"), p, unix.IN_OPEN, ""
			}},
		{name: "wds-not-a-tar", format: "webdataset", rank: 1, cause: "train-000001.tar", reason: "invalid tar header",
			extra: []string{"-num-classes", "4"},
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := shardsOf(t)
				p := filepath.Join(d, "train-000001.tar")
				b := make([]byte, 20000)
				rand.Read(b)
				writeFile(t, p, b)
				return d, filepath.Join(t.TempDir(), "run"), p, unix.IN_OPEN, ""
			}},
		{name: "npy-label-minus-1", format: "npy", rank: -1, cause: "train_labels.npy", reason: "-1",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				d := arraysOf(t, 37)
				return d, filepath.Join(t.TempDir(), "run"), filepath.Join(d, "train_labels.npy"), unix.IN_OPEN, ""
			}},
		{name: "checkpoint-disk-full", format: "imagefolder", rank: 0, cause: "ckpt-000000002.npz", reason: "no space left on device",
			extra: []string{"-ckpt-every", "2"},
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				// 2 MiB hold the metrics and the plot but not a resnet18 checkpoint (~90 MB).
				out := mountTmpfs(t, "size=2m")
				return folderCopy(t), out, out, unix.IN_CREATE, "ckpt-"
			}},
		{name: "out-read-only", format: "imagefolder", rank: 0, cause: "tmpfs/run", reason: "read-only file system",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				return folderCopy(t), filepath.Join(mountTmpfs(t, "size=1m,ro"), "run"), "", 0, ""
			}},
		{name: "out-under-a-file", format: "imagefolder", rank: 0, cause: "not-a-dir", reason: "not a directory",
			setup: func(t *testing.T) (string, string, string, uint32, string) {
				f := filepath.Join(t.TempDir(), "not-a-dir")
				writeFile(t, f, []byte("x"))
				return folderCopy(t), filepath.Join(f, "run"), "", 0, ""
			}},
	}
	type result struct {
		name   string
		toExit time.Duration
		report string
	}
	var results []result
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shmBefore := shmFiles()
			dataDir, out, watch, mask, nameHas := tc.setup(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var touched <-chan time.Time
			if watch != "" {
				touched = watchFirst(ctx, t, watch, mask, nameHas)
			}
			args := []string{"-data", dataDir, "-data-format", tc.format, "-arch", "resnet18", "-image-size", "16",
				"-epochs", "2", "-b", "8", "-j", "2", "-lr", "0.05", "-seed", "5", "-resume", "none", "-quiet",
				"-print-freq", "100", "-timeout", "2m", "-out", out}
			j := startJob(t, nil, append(args, tc.extra...)...)
			if !j.wait(3 * time.Minute) {
				t.Fatalf("gprun still running after 3 min; output:\n%s", j.output())
			}
			failAt, how := j.start, "gprun's start"
			if touched != nil {
				select {
				case failAt = <-touched:
					how = "a worker's first touch of " + filepath.Base(watch)
				default:
					t.Errorf("no worker touched %s", watch)
				}
			}
			toExit := j.end.Sub(failAt)
			s := j.output()
			if j.exitCode() == 0 {
				t.Errorf("gprun exited 0")
			}
			if toExit > 10*time.Second {
				t.Errorf("gprun exited %v after the failure, want within 10 s", toExit)
			}
			// One report, naming the rank, the file and the reason; gprun's own lines name the
			// cause once.
			var reports []string
			causeLines := 0
			for _, l := range j.gprunLines() {
				if strings.HasPrefix(l, "gprun: rank ") {
					reports = append(reports, l)
				}
				if strings.Contains(l, tc.cause) {
					causeLines++
				}
			}
			if len(reports) != 1 {
				t.Errorf("%d failure reports from gprun, want 1", len(reports))
			} else {
				r := reports[0]
				if tc.rank >= 0 && !strings.HasPrefix(r, fmt.Sprintf("gprun: rank %d ", tc.rank)) {
					t.Errorf("the report does not name rank %d: %s", tc.rank, r)
				}
				// The reason after the cause's last mention (the temporary folders' names hold
				// the cases' names).
				if i := strings.LastIndex(r, tc.cause); i < 0 || !strings.Contains(r[i:], tc.reason) {
					t.Errorf("the report does not name %q and %q: %s", tc.cause, tc.reason, r)
				}
				results = append(results, result{tc.name, toExit, r})
			}
			if causeLines != 1 {
				t.Errorf("gprun's own lines name %s %d times, want once", tc.cause, causeLines)
			}
			if pids := jobProcesses(j.id); len(pids) > 0 {
				t.Errorf("processes of the job left after gprun exited: %v", pids)
			}
			for _, f := range shmLeftBehind(shmBefore) {
				t.Errorf("/dev/shm/%s left behind", f)
			}
			t.Logf("exit %d, %v after %s (%v after gprun's start)", j.exitCode(), toExit.Round(time.Millisecond), how, j.end.Sub(j.start).Round(time.Millisecond))
			if t.Failed() || testing.Verbose() {
				t.Logf("output:\n%s", s)
			}
		})
	}
	for _, r := range results {
		t.Logf("%-22s %8v  %s", r.name, r.toExit.Round(time.Millisecond), r.report)
	}
}

// A SIGKILLed gprun, which can neither stop nor wait for its workers, leaves no worker
// running 5 s later: the workers of a real job (the trainer, mid-training) die with it.
func TestWorkersDieWithKilledGprun(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a 2-rank job")
	}
	shmBefore := shmFiles()
	out := filepath.Join(t.TempDir(), "run")
	j := startJob(t, nil, "-data", folderCopy(t), "-arch", "resnet18", "-image-size", "16", "-epochs", "50",
		"-b", "8", "-j", "2", "-resume", "none", "-print-freq", "1", "-quiet", "-out", out)
	// Training is under way once rank 0 has logged a step's metrics.
	metrics := filepath.Join(out, "metrics.jsonl")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(metrics); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) || j.wait(0) {
			t.Fatalf("no step's metrics in %s within 2 min; output:\n%s", metrics, j.output())
		}
	}
	workers := jobProcesses(j.id)
	if len(workers) != 3 { // gprun and its 2 workers
		t.Fatalf("%d processes in the job, want gprun and 2 workers: %v", len(workers), workers)
	}
	j.cmd.Process.Kill()
	killed := time.Now()
	j.wait(10 * time.Second)
	var left []int
	for time.Since(killed) < 5*time.Second {
		if left = jobProcesses(j.id); len(left) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(killed)
	if len(left) > 0 {
		t.Fatalf("workers %v still running %v after gprun's SIGKILL", left, took.Round(time.Millisecond))
	}
	// The shared-memory files are unlinked once mapped, so even killed workers leave none.
	for _, f := range shmLeftBehind(shmBefore) {
		t.Errorf("/dev/shm/%s left behind", f)
	}
	t.Logf("both workers gone %v after gprun's SIGKILL", took.Round(time.Millisecond))
}

// The fixtures: a 4-class ImageFolder of 16x16... JPEGs written once per test binary (24
// training and 8 validation images per class, 20x20), and per test a copy to break.
var (
	folderOnce sync.Once
	folderDir  string
	folderErr  error
)

func folderCopy(t *testing.T) string {
	t.Helper()
	folderOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gp-imagenet-failures")
		if err != nil {
			folderErr = err
			return
		}
		folderDir = filepath.Join(dir, "synth")
		folderErr = synth.WriteSplit(folderDir, 4, 24, 8, 20, 3)
	})
	if folderErr != nil {
		t.Fatal(folderErr)
	}
	dst := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dst, os.DirFS(folderDir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// samples lists dir/side/<class>/<file> in ImageFolder order with class indices.
func samples(t *testing.T, dir, side string) (paths []string, labels []int) {
	t.Helper()
	err := fs.WalkDir(os.DirFS(filepath.Join(dir, side)), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, filepath.Join(dir, side, p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		var k int
		fmt.Sscanf(filepath.Base(filepath.Dir(p)), "class_%d", &k)
		labels = append(labels, k)
	}
	return paths, labels
}

// shardsOf writes the ImageFolder fixture as WebDataset shards, {train,val}-00000{0,1}.tar,
// sample i in shard i%2.
func shardsOf(t *testing.T) string {
	t.Helper()
	src := folderCopy(t)
	dir := t.TempDir()
	for _, side := range []string{"train", "val"} {
		paths, labels := samples(t, src, side)
		for shard := 0; shard < 2; shard++ {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			for i := shard; i < len(paths); i += 2 {
				img, err := os.ReadFile(paths[i])
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("s%05d", i)
				for _, m := range []struct {
					name string
					data []byte
				}{{key + ".jpg", img}, {key + ".cls", []byte(fmt.Sprint(labels[i]))}} {
					if err := tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data))}); err != nil {
						t.Fatal(err)
					}
					tw.Write(m.data)
				}
			}
			tw.Close()
			writeFile(t, filepath.Join(dir, fmt.Sprintf("%s-%06d.tar", side, shard)), b.Bytes())
		}
	}
	return dir
}

// arraysOf writes the ImageFolder fixture as .npy arrays ({train,val}_images.npy, uint8
// NHWC; {train,val}_labels.npy, int64), with training label bad set to -1.
func arraysOf(t *testing.T, bad int) string {
	t.Helper()
	src := folderCopy(t)
	dir := t.TempDir()
	for _, side := range []string{"train", "val"} {
		paths, labels := samples(t, src, side)
		var pix []byte
		size := 0
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			img, err := jpeg.Decode(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			r := img.Bounds()
			size = r.Dx()
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					cr, cg, cb, _ := img.At(x, y).RGBA()
					pix = append(pix, byte(cr>>8), byte(cg>>8), byte(cb>>8))
				}
			}
		}
		lab := make([]byte, 8*len(labels))
		for i, l := range labels {
			v := int64(l)
			if side == "train" && i == bad {
				v = -1
			}
			binary.LittleEndian.PutUint64(lab[8*i:], uint64(v))
		}
		writeNpy(t, filepath.Join(dir, side+"_images.npy"), "|u1", fmt.Sprintf("%d, %d, %d, 3", len(paths), size, size), pix)
		writeNpy(t, filepath.Join(dir, side+"_labels.npy"), "<i8", fmt.Sprintf("%d,", len(labels)), lab)
	}
	return dir
}

// writeNpy writes a little-endian .npy file (version 1.0) of the given dtype and shape
// (the tuple's inside, as numpy prints it).
func writeNpy(t *testing.T, path, descr, shape string, raw []byte) {
	t.Helper()
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	for (10+len(hdr)+1)%64 != 0 {
		hdr += " "
	}
	hdr += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	b.Write(raw)
	writeFile(t, path, b.Bytes())
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mountTmpfs mounts a tmpfs with the given options (e.g. "size=2m", "size=1m,ro") on a new
// folder and unmounts it when the test ends; it skips the test where mounting is not
// permitted (not root, or a container without CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%s) here: %v: %s", opts, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		// Lazily, so that a process still holding a file there cannot keep it mounted.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}
