package checkpoint

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorgonia-parallel/gp/nn"
)

// tiny builds the ParamSet of nn/checkpoint/testdata/make_fixtures.py's Tiny module.
func tiny(t *testing.T) *nn.ParamSet {
	t.Helper()
	ps, err := nn.NewParamSet(nil, []*nn.Param{
		{Name: "conv1.weight", Shape: []int{4, 3, 3, 3}},
		{Name: "bn1.weight", Shape: []int{4}, NoWeightDecay: true},
		{Name: "bn1.bias", Shape: []int{4}, NoWeightDecay: true},
		{Name: "fc.weight", Shape: []int{2, 4}},
		{Name: "fc.bias", Shape: []int{2}, NoWeightDecay: true},
	}, []*nn.Buffer{
		{Name: "bn1.running_mean", Shape: []int{4}},
		{Name: "bn1.running_var", Shape: []int{4}},
		{Name: "bn1.num_batches_tracked", Shape: []int{}, Int64: make([]int64, 1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestLoadTorchStateDict(t *testing.T) {
	entries, err := Load("testdata/tiny_bn.npz")
	if err != nil {
		t.Fatal(err)
	}
	ps := tiny(t)
	rep, err := LoadModel(ps, entries)
	if err != nil || !rep.OK() {
		t.Fatalf("report %v, error %v", rep, err)
	}
	if got := ps.Buffer("bn1.num_batches_tracked").Int64[0]; got != 2 {
		t.Errorf("num_batches_tracked = %d, want 2", got)
	}
	// Values are bit-exact copies: compare against the file's own entries.
	for _, e := range entries {
		if p := ps.Param(e.Name); p != nil && !slices.Equal(p.Data, e.F32) {
			t.Errorf("%s not copied", e.Name)
		}
	}
	if rv := ps.Buffer("bn1.running_var").Data; rv[0] == 1 || rv[0] == 0 {
		t.Errorf("running_var %v looks untrained", rv)
	}
}

func TestReadFloat64AndInt32(t *testing.T) {
	entries, err := Load("testdata/mixed.npz")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]nn.StateEntry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	if e := got["scalar"]; len(e.Shape) != 0 || !slices.Equal(e.F64, []float64{2.5}) {
		t.Errorf("scalar = %+v", e)
	}
	if e := got["vec"]; !slices.Equal(e.F64, []float64{0, 0.25, 0.5}) {
		t.Errorf("vec = %+v", e)
	}
	if e := got["ints"]; !slices.Equal(e.I64, []int64{-1, 2, 3}) {
		t.Errorf("ints = %+v", e)
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.npz")
	in := []nn.StateEntry{
		{Name: "layer1.0.conv1.weight", Shape: []int{2, 1, 3, 3}, F32: make([]float32, 18)},
		{Name: "bn.num_batches_tracked", Shape: []int{}, I64: []int64{-7}},
		{Name: "x.f64", Shape: []int{3}, F64: []float64{1e300, -0.5, 3}},
		{Name: "empty", Shape: []int{0, 4}, F32: []float32{}},
	}
	for i := range in[0].F32 {
		in[0].F32[i] = float32(i) * 1.5
	}
	if err := Save(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d entries, want %d", len(out), len(in))
	}
	for i := range in {
		a, b := in[i], out[i]
		if a.Name != b.Name || !slices.Equal(a.Shape, b.Shape) || !slices.Equal(a.F32, b.F32) ||
			!slices.Equal(a.F64, b.F64) || !slices.Equal(a.I64, b.I64) {
			t.Errorf("entry %d: wrote %+v, read %+v", i, a, b)
		}
	}
}

func TestLoadModelReports(t *testing.T) {
	good, err := Load("testdata/tiny_bn.npz")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func([]nn.StateEntry) []nn.StateEntry) []nn.StateEntry {
		return f(slices.Clone(good))
	}
	for _, tc := range []struct {
		name       string
		entries    []nn.StateEntry
		opts       []LoadOption
		wantErr    bool
		missing    []string
		unexpected []string
		mismatched string
	}{
		{name: "missing", entries: edit(func(es []nn.StateEntry) []nn.StateEntry {
			return slices.DeleteFunc(es, func(e nn.StateEntry) bool { return e.Name == "fc.bias" })
		}), wantErr: true, missing: []string{"fc.bias"}},
		{name: "missing non-strict", opts: []LoadOption{NonStrict()}, entries: edit(func(es []nn.StateEntry) []nn.StateEntry {
			return slices.DeleteFunc(es, func(e nn.StateEntry) bool { return e.Name == "bn1.running_mean" })
		}), missing: []string{"bn1.running_mean"}},
		{name: "unexpected", entries: append(slices.Clone(good), nn.StateEntry{Name: "head.weight", Shape: []int{1}, F32: []float32{1}}),
			wantErr: true, unexpected: []string{"head.weight"}},
		{name: "unexpected non-strict", opts: []LoadOption{NonStrict()},
			entries:    append(slices.Clone(good), nn.StateEntry{Name: "head.weight", Shape: []int{1}, F32: []float32{1}}),
			unexpected: []string{"head.weight"}},
		{name: "mis-shaped", opts: []LoadOption{NonStrict()}, entries: edit(func(es []nn.StateEntry) []nn.StateEntry {
			for i := range es {
				if es[i].Name == "fc.weight" {
					es[i].Shape = []int{4, 2}
				}
			}
			return es
		}), wantErr: true, mismatched: "fc.weight: got [4 2], want [2 4]"},
		{name: "wrong dtype", entries: edit(func(es []nn.StateEntry) []nn.StateEntry {
			for i := range es {
				if es[i].Name == "bn1.num_batches_tracked" {
					es[i] = nn.StateEntry{Name: es[i].Name, Shape: []int{}, F32: []float32{2}}
				}
			}
			return es
		}), wantErr: true, mismatched: "bn1.num_batches_tracked: got float32, want int64"},
		{name: "optimizer keys ignored", entries: append(slices.Clone(good), nn.StateEntry{Name: "optim.step", Shape: []int{}, I64: []int64{3}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := tiny(t)
			rep, err := LoadModel(ps, tc.entries, tc.opts...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrMismatch) {
				t.Errorf("error %v does not wrap ErrMismatch", err)
			}
			if !slices.Equal(rep.Missing, tc.missing) || !slices.Equal(rep.Unexpected, tc.unexpected) {
				t.Errorf("report %v", rep)
			}
			if tc.mismatched != "" && (len(rep.Mismatched) != 1 || rep.Mismatched[0] != tc.mismatched) {
				t.Errorf("mismatched %q, want %q", rep.Mismatched, tc.mismatched)
			}
			if err != nil && ps.Param("conv1.weight").Data[0] != 0 {
				t.Errorf("a failed load copied data")
			}
		})
	}
}

type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n < len(p) {
		return 0, errors.New("no space left on device")
	}
	f.n -= len(p)
	return f.w.Write(p)
}

func TestFailedSaveKeepsPreviousFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.npz")
	old := []nn.StateEntry{{Name: "w", Shape: []int{2}, F32: []float32{1, 2}}}
	if err := Save(path, old); err != nil {
		t.Fatal(err)
	}
	testHookWriter = func(w io.Writer) io.Writer { return &failAfter{w: w, n: 100} }
	defer func() { testHookWriter = nil }()
	err := Save(path, []nn.StateEntry{{Name: "w", Shape: []int{1000}, F32: make([]float32, 1000)}})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("error %v, want one naming %s and the cause", err, path)
	}
	got, err := Load(path)
	if err != nil || len(got) != 1 || !slices.Equal(got[0].F32, []float32{1, 2}) {
		t.Fatalf("previous file damaged: %+v, %v", got, err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("temporary files left behind: %v", names)
	}
	if err := Save(filepath.Join(dir, "missing-dir", "x.npz"), old); err == nil || !strings.Contains(err.Error(), "missing-dir") {
		t.Errorf("save into a missing directory: %v", err)
	}
}

func TestCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.npz")
	big := make([]float32, 4096)
	for i := range big {
		big[i] = float32(i)
	}
	if err := Save(path, []nn.StateEntry{{Name: "layer.weight", Shape: []int{64, 64}, F32: big}}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	flipped := slices.Clone(data)
	flipped[len(flipped)/2] ^= 0xff // inside layer.weight's data: the CRC check catches it
	for _, tc := range []struct {
		name, content, want string
	}{
		{"truncated", string(data[:len(data)/2]), "truncated.npz"},
		{"empty", "", "empty.npz"},
		{"flipped", string(flipped), `key "layer.weight"`},
		{"not a zip", "hello", "not a zip.npz"},
	} {
		p := filepath.Join(dir, tc.name+".npz")
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrCorrupt naming %q", tc.name, err, tc.want)
		}
	}
}

// TestResumeTraining saves model, AdamW, schedule, step, epoch and an RNG mid-run, restores
// into fresh objects, and checks the resumed run is bit-identical to the uninterrupted one.
func TestResumeTraining(t *testing.T) {
	ref := restoreRun(t, true, false)
	ref.train(6)

	a := restoreRun(t, true, false)
	a.train(3)
	path := filepath.Join(t.TempDir(), "resume.npz")
	st := a.state
	st.Step, st.Epoch = 3, 1
	if err := SaveState(path, st); err != nil {
		t.Fatal(err)
	}
	b := restoreRun(t, true, false)
	b.rng.Seed(9, 9)
	st2 := b.state
	if _, err := LoadState(path, st2); err != nil {
		t.Fatal(err)
	}
	if st2.Step != 3 || st2.Epoch != 1 {
		t.Errorf("step %d epoch %d, want 3 1", st2.Step, st2.Epoch)
	}
	b.train(3)
	if !slices.Equal(b.ps.Data, ref.ps.Data) || b.opt.LR() != ref.opt.LR() ||
		b.ps.Buffer("bn1.num_batches_tracked").Int64[0] != 6 {
		t.Fatal("resumed run differs from the uninterrupted one")
	}
}
