package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// At world size 1 without a launcher (an in-process group, no rendezvous store), -device cuda
// -strategy ddp goes through the device reducer and an NCCL group of one made through a store
// of one on loopback: its timeline has the buckets' all-reduce events, which -strategy none's
// plain device path has not, and both train resnet8 3 steps with the CPU's losses (the
// all-reduce of one rank is a copy, so deviceTol as the other device rows). -strategy zero3
// runs there too on AdamW (the device's zero3 steps AdamW only; examples/imagenet's recipe
// picks it when -opt is not given), with the losses of the CPU's zero3 under AdamW; SGD is
// refused, naming -opt and what to use instead.
func TestDeviceWorld1ThroughNCCL(t *testing.T) {
	emulatorEnv(t, 1)
	rows := []struct {
		name, strategy, opt string
		cpuOpt              string // the CPU reference's -opt
		allReduce           bool   // the timeline has all-reduce events
		wantErr             []string
	}{
		{name: "ddp", strategy: "ddp", allReduce: true},
		{name: "none", strategy: "none"},
		{name: "zero3 adamw", strategy: "zero3", opt: "adamw", cpuOpt: "adamw"},
		{name: "zero3 sgd", strategy: "zero3", opt: "sgd", wantErr: []string{"-opt sgd", "is not supported on the device", "-opt adamw"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			base := tinyConfig(t, t.TempDir())
			base.Arch, base.Epochs, base.MaxSteps, base.Strategy, base.LR, base.PrintFreq = "resnet8", 1, 3, r.strategy, 0.001, 1
			dev := base
			dev.Out, dev.Device, dev.Optimizer = t.TempDir(), "cuda", r.opt
			if r.wantErr != nil {
				_, err := fitRun(context.Background(), dev, io.Discard)
				if err == nil {
					t.Fatalf("-strategy %s -opt %s -device cuda succeeded", r.strategy, r.opt)
				}
				for _, s := range r.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				t.Logf("refused: %v", err)
				return
			}
			runDeviceWorld(t, 1, dev)
			cpu := base
			cpu.Optimizer = r.cpuOpt
			runWorld(t, 1, cpu)
			worst := compareSteps(t, cpu.Out, dev.Out, deviceTol)
			n := -1 // device zero3 keeps no timeline; it has no path without NCCL
			if r.strategy != "zero3" {
				b, err := os.ReadFile(filepath.Join(dev.Out, "timeline-rank0.json"))
				if err != nil {
					t.Fatal(err)
				}
				n = strings.Count(string(b), `"name":"all-reduce bucket `)
				if (n > 0) != r.allReduce {
					t.Errorf("the timeline has %d all-reduce events; want some: %v", n, r.allReduce)
				}
			}
			if n < 0 {
				t.Logf("world 1, -strategy %s -device cuda: losses within %.1e of the CPU's", r.strategy, worst)
			} else {
				t.Logf("world 1, -strategy %s -device cuda: losses within %.1e of the CPU's; %d all-reduce events in the timeline", r.strategy, worst, n)
			}
		})
	}
}

// cuda/gpucheck's compare.py reads a failed device row's error from the trainer's log (main
// prints "imagenet: " and the error) and calls it "not supported" when the trainer refused a
// combination that is not on the device, "FAIL" otherwise. Here the errors are the ones Run
// returns for each of the device's refusals and for a real failure (a malformed -device),
// written in run.sh's layout.
func TestDeviceRefusalsAsCompareClassifiesThem(t *testing.T) {
	emulatorEnv(t, 1)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	compare, err := filepath.Abs(filepath.Join("..", "cuda", "gpucheck", "compare.py"))
	if err != nil {
		t.Fatal(err)
	}
	rows := []struct {
		name string
		cfg  func(c *runConfig)
		want string // the start of compare.py's result
	}{
		{"zero3-sgd", func(c *runConfig) { c.Strategy, c.Optimizer = "zero3", "sgd" }, "not supported: "},
		{"zero3-offload-disk", func(c *runConfig) { c.Strategy, c.Offload, c.Optimizer = "zero3", "disk", "adamw" }, "not supported: "},
		{"bad-device", func(c *runConfig) { c.Device = "cuda:x" }, "FAIL: "},
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	var manifest strings.Builder
	for _, r := range rows {
		c := tinyConfig(t, t.TempDir())
		c.Arch, c.MaxSteps, c.Device = "resnet8", 1, "cuda"
		r.cfg(&c)
		_, err := fitRun(context.Background(), c, io.Discard)
		if err == nil {
			t.Fatalf("%s: the trainer ran", r.name)
		}
		log := "train: starting\nimagenet: " + err.Error() + "\n"
		if err := os.WriteFile(filepath.Join(dir, "logs", r.name+".log"), []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&manifest, `{"name":%q,"arch":"resnet8","image":16,"batch":8,"device":"cuda","strategy":%q,"amp":"off","opt":"","steps":1,"rc":1,"seconds":1,"out":"runs/%s","log":"logs/%s.log"}`+"\n",
			r.name, c.Strategy, r.name, r.name)
	}
	if err := os.WriteFile(filepath.Join(dir, "trainer.jsonl"), []byte(manifest.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, compare, "--dir", dir).CombinedOutput()
	// Exit status 1: the bad -device row is a failure.
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("compare.py: %v (want exit status 1)\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "table.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("table.jsonl has %d rows, want %d:\n%s", len(lines), len(rows), b)
	}
	for i, r := range rows {
		var row struct{ Result string }
		if err := json.Unmarshal([]byte(lines[i]), &row); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(row.Result, r.want) {
			t.Errorf("%s: compare.py says %q, want %q...", r.name, row.Result, r.want)
		}
	}
	t.Logf("compare.py's table:\n%s", out)
}
