package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorgonia-parallel/gp/internal/proctest"
	"github.com/gorgonia-parallel/gp/parallel/launch"
)

func TestNprocPerNode(t *testing.T) {
	for _, tc := range []struct {
		spec, cuda string // cuda "unset": CUDA_VISIBLE_DEVICES unset
		want       int
		note, err  string
	}{
		{"4", "unset", 4, "", ""},
		{"gpu", "0,1,2", 3, "one per GPU (CUDA_VISIBLE_DEVICES=\"0,1,2\")", ""},
		{"gpu", "GPU-3f2a,GPU-77b1", 2, "one per GPU", ""},
		{"auto", "0,-1,2", 1, "one per GPU", ""},
		{"gpu", "", 0, "", "--nproc-per-node gpu: no GPU (CUDA_VISIBLE_DEVICES=\"\")"},
		{"auto", "", 0, "no GPU (CUDA_VISIBLE_DEVICES=\"\"), so", ""},
		{"cpu", "0", 0, "one per CPU", ""},
		{"0", "unset", 0, "", "want a number of workers, gpu, cpu or auto"},
		{"many", "unset", 0, "", "want a number of workers, gpu, cpu or auto"},
	} {
		look := func(k string) (string, bool) {
			if k == "CUDA_VISIBLE_DEVICES" && tc.cuda != "unset" {
				return tc.cuda, true
			}
			return "", false
		}
		n, note, err := nprocPerNode(tc.spec, look)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s (CUDA_VISIBLE_DEVICES %q): err %v, want %q", tc.spec, tc.cuda, err, tc.err)
			}
		case err != nil || (tc.want > 0 && n != tc.want) || n < 1 || !strings.Contains(note, tc.note):
			t.Errorf("%s (CUDA_VISIBLE_DEVICES %q) = %d, %q, %v; want %d, %q", tc.spec, tc.cuda, n, note, err, tc.want, tc.note)
		}
	}
}

func TestParseNNodes(t *testing.T) {
	for _, tc := range []struct {
		s      string
		lo, hi int
		ok     bool
	}{{"1", 1, 1, true}, {"2", 2, 2, true}, {"1:4", 1, 4, true}, {"3:2", 0, 0, false}, {"0", 0, 0, false}, {"a:b", 0, 0, false}} {
		lo, hi, err := parseNNodes(tc.s)
		if (err == nil) != tc.ok || lo != tc.lo || hi != tc.hi {
			t.Errorf("parseNNodes(%q) = %d, %d, %v", tc.s, lo, hi, err)
		}
	}
}

func TestParseStreams(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want [3]launch.Streams // local ranks 0, 1, 2
		ok   bool
	}{
		{"", [3]launch.Streams{}, true},
		{"3", [3]launch.Streams{3, 3, 3}, true},
		{"0:1,2:2", [3]launch.Streams{1, 0, 2}, true},
		{"4", [3]launch.Streams{}, false},
		{"0:x", [3]launch.Streams{}, false},
	} {
		s, err := launch.ParseStreams(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("ParseStreams(%q): %v", tc.spec, err)
			continue
		}
		if got := [3]launch.Streams{s.For(0), s.For(1), s.For(2)}; tc.ok && got != tc.want {
			t.Errorf("ParseStreams(%q) = %v, want %v", tc.spec, got, tc.want)
		}
	}
}

// Flags come from PET_* and MASTER_* when the command line leaves them out; a flag given
// wins over its variable; bad values name the variable.
func TestEnvDefaults(t *testing.T) {
	env := map[string]string{"PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "4", "PET_RDZV_ID": "kf", "MASTER_ADDR": "m0",
		"MASTER_PORT": "2345", "PET_NODE_RANK": "x"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nproc_per_node", "2", "--node-rank", "1"}, "nnodes=1:3 nproc=2 id=kf addr=m0 port=2345 rank=1 err=<nil>"},
		{[]string{"--master-addr", "a"}, "nnodes=1:3 nproc=4 id=kf addr=a port=2345 rank=0 err=PET_NODE_RANK=\"x\": "},
	} {
		fs, p := testFlags()
		fs.Parse(tc.args)
		cli := map[string]bool{}
		for _, a := range tc.args {
			if strings.HasPrefix(a, "--") {
				cli[canonical(strings.TrimPrefix(a, "--"))] = true
			}
		}
		_, err := envDefaults(fs, cli, func(k string) string { return env[k] })
		got := p() + " err=" + errString(err)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%v: got %s\nwant %s", tc.args, got, tc.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A SLURM job that started two gprun tasks: the node rank and count come from SLURM, and a
// --nnodes that disagrees is refused naming both.
func TestGprunUnderSrun(t *testing.T) {
	for k, v := range map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
		"SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "cn[07-08]", "GP_RDZV_SECRET": "x"} {
		t.Setenv(k, v)
	}
	var out bytes.Buffer
	cfg, _, code := configure(context.Background(), []string{"--nproc-per-node", "2", "--", "prog"}, &out)
	if code != -1 || cfg.NNodes != 2 || cfg.NodeRank != 1 || cfg.MasterAddr != "cn07" || cfg.MasterPort != 19242 {
		t.Errorf("code %d, config %+v; want node 1 of 2, master cn07:19242; output %s", code, cfg, out.String())
	}
	out.Reset()
	_, _, code = configure(context.Background(), []string{"--nnodes", "1", "--", "prog"}, &out)
	if want := "--nnodes 1 (from --nnodes) but SLURM_NTASKS=2"; code != 2 || !strings.Contains(out.String(), want) {
		t.Errorf("code %d, output %q; want 2 and %q", code, out.String(), want)
	}
}

// A node with another secret, or another command line, is refused with an error naming
// what differs and where it came from.
func TestC10dRefusals(t *testing.T) {
	t.Setenv("GPRUN_TEST_C10D", "once")
	ep := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	common := []string{"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", ep, "--rdzv-id", "refuse",
		"--local-addr", "127.0.0.1", "--monitor-interval", "0.05", "--rdzv-conf", "join_timeout=5"}
	host := startNode(ctx, append(common, "--rdzv-secret", "one")...)
	host.waitFor(t, "hosting the store", 1, 10*time.Second)
	var out bytes.Buffer
	code := run(ctx, append(common, "--rdzv-secret", "two", "--", os.Args[0]), &out, &out, nil)
	if want := "refused this node's secret (from --rdzv-secret, fingerprint"; code != 1 || !strings.Contains(out.String(), want) {
		t.Errorf("other secret: exit %d, output %q; want 1 and %q", code, out.String(), want)
	}
	out.Reset()
	code = run(ctx, append(common, "--rdzv-secret", "one", "--", os.Args[0], "-test.run=^$", "-arch", "resnet50"), &out, &out, nil)
	if want := `runs "c10d.test -test.run=^$ -arch resnet50", but node 0`; code != 1 || !strings.Contains(strings.ReplaceAll(out.String(), filepath.Base(os.Args[0]), "c10d.test"), want) {
		t.Errorf("other command: exit %d, output %q; want 1 and %q", code, out.String(), want)
	}
	host.cancel()
	host.wait(t, 10*time.Second)
}

// --log-dir with --redirects 1 and --tee 2: each rank's stdout only in its file, its stderr
// in its file and on the console.
func TestLogDir(t *testing.T) {
	t.Setenv("GPRUN_TEST_EXIT", "0")
	dir := t.TempDir()
	var out bytes.Buffer
	code := run(context.Background(), []string{"--standalone", "--nproc-per-node", "2", "--rdzv-id", "logs", "--log-dir", dir,
		"--redirects", "1", "--tee", "2", "--", os.Args[0], "-test.run=^$"}, &out, &out, nil)
	if code != 0 || strings.Contains(out.String(), "rank 1 of 2") {
		t.Errorf("exit %d; stdout should be in the files only; output:\n%s", code, out.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "logs", "attempt_0", "1", "stdout.log"))
	if err != nil || string(b) != "rank 1 of 2\n" {
		t.Errorf("rank 1's stdout.log: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "attempt_0", "0", "stderr.log")); err != nil {
		t.Errorf("rank 0's stderr.log: %v", err)
	}
}

// testFlags is the subset of gprun's flags TestEnvDefaults reads, and what they hold.
func testFlags() (*flag.FlagSet, func() string) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nnodes := fs.String("nnodes", "1", "")
	nproc := fs.String("nproc-per-node", "1", "")
	fs.StringVar(nproc, "nproc_per_node", "1", "")
	id := fs.String("rdzv-id", "", "")
	addr := fs.String("master-addr", "127.0.0.1", "")
	port := fs.Int("master-port", 0, "")
	rank := fs.Int("node-rank", 0, "")
	return fs, func() string {
		return fmt.Sprintf("nnodes=%s nproc=%s id=%s addr=%s port=%d rank=%d", *nnodes, *nproc, *id, *addr, *port, *rank)
	}
}
