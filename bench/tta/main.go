// Command tta measures time to accuracy: the demo's job (Fashion-MNIST, resnet8_s2, the demo's
// recipe: SGD momentum 0.9, lr 0.2 for the global batch of 128, cosine to 0 per step, weight
// decay 5e-4 except BatchNorm and biases, label smoothing 0.1, horizontal flips, 8 epochs,
// test top-1 on all 10,000 test images after each epoch, 2 processes of one thread) trained
// by ours (gprun + the trainer, as `make demo` runs it) and by PyTorch DDP over gloo written
// to match it (bench/tta/torch_tta.py), both from the same initial weights. It first checks
// that the two models are one: the same parameter count and the same train-mode loss on the
// first 128 training images within 1e-5 (cmd/modelcheck against PyTorch). It writes
// bench/results/tta.json: per side the wall seconds to the first epoch whose test top-1
// reaches the target (none when it never does: then the best is reported, never a time) and
// the final top-1; ratio is PyTorch's seconds over ours. With -reps N (default 3) the two
// sides run N times in alternating order (ours first, then PyTorch's first, ...), so that a
// machine whose speed drifts during a run does not favour the side that always runs first;
// ratio is then the median of the repetitions' ratios, sides are the median repetition's, and
// every repetition is kept under reps.
//
//	go run ./bench/tta [-target 91] [-epochs 8] [-reps 3]     (make bench-tta)
//
// Without PyTorch (Debian's python3-torch for /usr/bin/python3) it says so and reports ours.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
	"github.com/gorgonia-parallel/gp/internal/blasimpl"
	"github.com/gorgonia-parallel/gp/internal/npyfile"
	"github.com/gorgonia-parallel/gp/models"
	"github.com/gorgonia-parallel/gp/nn"
)

const python = "/usr/bin/python3"

// side is one framework's result.
type side struct {
	Name          string    `json:"name"`
	SecondsToGoal *float64  `json:"seconds_to_target"` // null when the target was not reached
	EpochOfGoal   *int      `json:"epoch_of_target"`
	FinalTop1     float64   `json:"final_top1"`
	BestTop1      float64   `json:"best_top1"`
	TotalSeconds  float64   `json:"total_seconds"`
	Top1ByEpoch   []float64 `json:"top1_by_epoch"`
	SecondsAt     []float64 `json:"seconds_by_epoch"`
	Note          string    `json:"note,omitempty"`
}

func main() {
	target := flag.Float64("target", 91, "test top-1 (%) to reach")
	epochs := flag.Int("epochs", 8, "epochs")
	dataDir := flag.String("data", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST's IDX files")
	out := flag.String("out", "bench/results/tta.json", "result file")
	reps := flag.Int("reps", 3, "repetitions of both sides, in alternating order; ratio is their median")
	flag.Parse()
	if *reps < 1 {
		log.Fatalf("bench/tta: -reps %d: give at least 1", *reps)
	}
	if err := run(*target, *epochs, *reps, *dataDir, *out); err != nil {
		log.Fatal("bench/tta: ", err)
	}
}

// repetition is one run of each side.
type repetition struct {
	First string   `json:"first"` // the side that ran first
	Sides []side   `json:"sides"`
	Ratio *float64 `json:"ratio"`           // null when a side did not reach the target or PyTorch is missing
	Load  float64  `json:"load_avg_1m_end"` // when the repetition ended
}

func run(target float64, epochs, reps int, dataDir, out string) error {
	work, err := os.MkdirTemp("", "gp-tta-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	prov := benchutil.Start("tta", os.Args[1:])
	fmt.Printf("bench/tta: Fashion-MNIST, resnet8_s2, %d epochs, target %.1f%% test top-1, 2 processes of one thread\n%s\n", epochs, target, prov.Machine)
	for _, pkg := range []string{"cmd/gprun", "examples/imagenet", "cmd/modelcheck"} {
		if msg, err := exec.Command("go", "build", "-o", filepath.Join(work, filepath.Base(pkg)), "./"+pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./%s: %v\n%s", pkg, err, msg)
		}
	}
	doc := map[string]any{
		"unit":   "wall seconds from the start of training to the end of the first epoch (its test evaluation included) whose test top-1 reaches the target",
		"target": target, "epochs": epochs,
	}
	weights := ""
	torchOK := exec.Command(python, "-c", "import torch").Run() == nil
	if torchOK {
		check, err := checkModels(work, dataDir)
		if err != nil {
			return err
		}
		doc["model_check"] = check
		weights = filepath.Join(work, "init.npz")
	} else {
		fmt.Println("PyTorch is not installed for", python, "(apt-get install python3-torch): reporting ours alone")
		doc["torch"] = "not installed"
	}
	var all []repetition
	for r := range reps {
		rp, err := runRep(work, dataDir, weights, epochs, target, r, torchOK)
		if err != nil {
			return err
		}
		all = append(all, rp)
		printSides(fmt.Sprintf("repetition %d of %d (%s first)", r+1, reps, rp.First), rp.Sides, target)
	}
	med := medianRep(all)
	prov.End()
	prov.Set(doc)
	doc["sides"], doc["reps"] = all[med].Sides, all
	var ratios []float64
	for _, rp := range all {
		if rp.Ratio != nil {
			ratios = append(ratios, *rp.Ratio)
		}
	}
	if torchOK {
		doc["ratio_per_rep"] = ratios
		if len(ratios) > 0 {
			doc["ratio"] = *all[med].Ratio
			if len(ratios) < len(all) {
				doc["ratio_note"] = fmt.Sprintf("%d of %d repetitions had a side that did not reach the target: the median is of the other %d", len(all)-len(ratios), len(all), len(ratios))
			}
		} else {
			doc["ratio"] = nil
			doc["ratio_note"] = "a side did not reach the target in any repetition: no ratio"
		}
	}
	printSides(fmt.Sprintf("median repetition (%d of %d)", med+1, reps), all[med].Sides, target)
	if r, ok := doc["ratio"].(float64); ok {
		fmt.Printf("ratio (PyTorch's seconds over ours), median of %d: %.2f (each: %s)\n", len(ratios), r, fmtRatios(ratios))
	}
	fmt.Printf("load average: %.2f when the run started, %.2f when it ended\n", prov.Machine.Load, prov.LoadEnd)
	return prov.Save(os.Stdout, out, doc)
}

// runRep runs both sides once, PyTorch's first in odd repetitions.
func runRep(work, dataDir, weights string, epochs int, target float64, r int, torchOK bool) (repetition, error) {
	runs := map[string]func() (side, error){
		"ours": func() (side, error) {
			return runOurs(filepath.Join(work, fmt.Sprintf("ours-%d", r)), work, dataDir, weights, epochs, target)
		},
		"PyTorch": func() (side, error) { return runTorch(work, dataDir, weights, epochs, target) },
	}
	order := []string{"ours"}
	if torchOK {
		order = append(order, "PyTorch")
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
	}
	got := map[string]side{}
	for _, name := range order {
		s, err := runs[name]()
		if err != nil {
			return repetition{}, fmt.Errorf("repetition %d: %w", r+1, err)
		}
		got[name] = s
	}
	rp := repetition{First: order[0], Sides: []side{got["ours"]}, Load: benchutil.LoadAvg()}
	if th, ok := got["PyTorch"]; ok {
		rp.Sides = append(rp.Sides, th)
		if ours := got["ours"]; ours.SecondsToGoal != nil && th.SecondsToGoal != nil {
			v := *th.SecondsToGoal / *ours.SecondsToGoal
			rp.Ratio = &v
		}
	}
	return rp, nil
}

// medianRep is the index of the median repetition: by ratio among those that have one (the
// lower middle of an even count), else by our seconds to the target, else by our best top-1.
func medianRep(all []repetition) int {
	idx := make([]int, 0, len(all))
	key := func(i int) float64 { return *all[i].Ratio }
	for i, rp := range all {
		if rp.Ratio != nil {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		for i, rp := range all {
			if rp.Sides[0].SecondsToGoal != nil {
				idx = append(idx, i)
			}
		}
		key = func(i int) float64 { return *all[i].Sides[0].SecondsToGoal }
	}
	if len(idx) == 0 {
		for i := range all {
			idx = append(idx, i)
		}
		key = func(i int) float64 { return -all[i].Sides[0].BestTop1 }
	}
	sort.SliceStable(idx, func(a, b int) bool { return key(idx[a]) < key(idx[b]) })
	return idx[(len(idx)-1)/2]
}

func printSides(title string, sides []side, target float64) {
	fmt.Printf("\n%s\n| side | seconds to %.0f%% | epoch | final top-1 | best top-1 | total s |\n|---|---|---|---|---|---|\n", title, target)
	for _, s := range sides {
		secs, ep := "not reached", "-"
		if s.SecondsToGoal != nil {
			secs, ep = fmt.Sprintf("%.1f", *s.SecondsToGoal), strconv.Itoa(*s.EpochOfGoal+1)
		}
		fmt.Printf("| %s | %s | %s | %.2f | %.2f | %.1f |\n", s.Name, secs, ep, s.FinalTop1, s.BestTop1, s.TotalSeconds)
	}
}

func fmtRatios(r []float64) string {
	parts := make([]string, len(r))
	for i, v := range r {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(parts, ", ")
}

// checkModels has PyTorch write the initial weights and a batch, then compares the parameter
// counts and the train-mode loss of that batch (cmd/modelcheck for ours).
func checkModels(work, dataDir string) (map[string]any, error) {
	outp, err := exec.Command(python, "bench/tta/torch_tta.py", "init", "--out", work, "--data", dataDir).Output()
	if err != nil {
		return nil, fmt.Errorf("torch_tta.py init: %w", err)
	}
	var th struct {
		Params    int     `json:"params"`
		FirstLoss float64 `json:"first_loss"`
		Torch     string  `json:"torch"`
	}
	if err := json.Unmarshal(lastJSON(outp), &th); err != nil {
		return nil, fmt.Errorf("torch_tta.py init printed %q: %w", outp, err)
	}
	mc := filepath.Join(work, "modelcheck-out")
	if msg, err := exec.Command(filepath.Join(work, "modelcheck"), "-arch", "resnet8_s2", "-num-classes", "10",
		"-weights", filepath.Join(work, "init.npz"), "-input", filepath.Join(work, "x.npy"),
		"-labels", filepath.Join(work, "y.npy"), "-train", "-out", mc).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("modelcheck: %v\n%s", err, msg)
	}
	loss, err := readScalarNpy(filepath.Join(mc, "loss.npy"))
	if err != nil {
		return nil, err
	}
	mod, err := models.New("resnet8_s2", 10)
	if err != nil {
		return nil, err
	}
	m, err := nn.NewModel(mod)
	if err != nil {
		return nil, err
	}
	ours := m.Params.NumParams()
	diff := math.Abs(loss - th.FirstLoss)
	fmt.Printf("model check: %d parameters (PyTorch %d); first-batch loss %.7f (PyTorch %.7f, |diff| %.2g)\n", ours, th.Params, loss, th.FirstLoss, diff)
	if ours != th.Params || diff > 1e-5 {
		return nil, fmt.Errorf("the two models differ: %d against %d parameters, loss %.7f against %.7f", ours, th.Params, loss, th.FirstLoss)
	}
	return map[string]any{"params": ours, "first_loss_ours": loss, "first_loss_torch": th.FirstLoss, "torch": th.Torch}, nil
}

// runOurs runs the demo's job under gprun and reads its metrics log.
func runOurs(dir, work, dataDir, weights string, epochs int, target float64) (side, error) {
	args := []string{"--nproc-per-node", "2", "--", filepath.Join(work, "imagenet"),
		"-data-format", "fashion-mnist", "-data", dataDir, "-arch", "resnet8_s2", "-image-size", "28", "-b", "128",
		"-epochs", strconv.Itoa(epochs), "-sched", "cosine", "-warmup-epochs", "0", "-lr", "0.2", "-wd", "5e-4",
		"-label-smoothing", "0.1", "-j", "1", "-print-freq", "100", "-quiet", "-out", dir, "-resume", "none"}
	if weights != "" {
		args = append(args, "-pretrained", weights)
	}
	cmd := exec.Command(filepath.Join(work, "gprun"), args...)
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return side{}, fmt.Errorf("ours: %v\n%s", err, tail(msg))
	}
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return side{}, err
	}
	defer f.Close()
	s := side{Name: "gorgonia-parallel (gprun, DDP)"}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Kind     string  `json:"kind"`
			Top1     float64 `json:"top1"`
			ElapsedS float64 `json:"elapsed_s"`
		}
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Kind == "val" {
			s.add(r.Top1, r.ElapsedS, target)
		}
	}
	return s, sc.Err()
}

// runTorch runs torch_tta.py's DDP training.
func runTorch(work, dataDir, weights string, epochs int, target float64) (side, error) {
	cmd := exec.Command(python, "bench/tta/torch_tta.py", "train", "--weights", weights, "--data", dataDir,
		"--epochs", strconv.Itoa(epochs), "--port", strconv.Itoa(29500+os.Getpid()%400))
	cmd.Env = benchutil.TorchEnv(append(os.Environ(), "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"), blasimpl.Core())
	outp, err := cmd.Output()
	if err != nil {
		return side{}, fmt.Errorf("torch_tta.py train: %w\n%s", err, tail(outp))
	}
	s := side{Name: "PyTorch " + "DDP (gloo)"}
	for _, line := range bytes.Split(outp, []byte("\n")) {
		var r struct {
			Epoch    *int    `json:"epoch"`
			Top1     float64 `json:"top1"`
			ElapsedS float64 `json:"elapsed_s"`
		}
		if json.Unmarshal(line, &r) == nil && r.Epoch != nil {
			s.add(r.Top1, r.ElapsedS, target)
		}
	}
	if len(s.Top1ByEpoch) == 0 {
		return s, errors.New("torch_tta.py train reported no epoch")
	}
	return s, nil
}

// add records an epoch's evaluation.
func (s *side) add(top1, elapsed, target float64) {
	s.Top1ByEpoch = append(s.Top1ByEpoch, top1)
	s.SecondsAt = append(s.SecondsAt, elapsed)
	s.FinalTop1, s.BestTop1, s.TotalSeconds = top1, math.Max(s.BestTop1, top1), elapsed
	if s.SecondsToGoal == nil && top1 >= target {
		e, t := len(s.Top1ByEpoch)-1, elapsed
		s.EpochOfGoal, s.SecondsToGoal = &e, &t
	}
	if s.SecondsToGoal == nil {
		s.Note = fmt.Sprintf("did not reach %.1f%%: best %.2f%%", target, s.BestTop1)
	} else {
		s.Note = ""
	}
}

func lastJSON(b []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return []byte(lines[len(lines)-1])
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// readScalarNpy reads a float32 or float64 scalar .npy file (what modelcheck writes).
func readScalarNpy(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	h, data, err := npyfile.ReadArray(f, st.Size())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case h.Descr == "<f4" && len(data) >= 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(data))), nil
	case h.Descr == "<f8" && len(data) >= 8:
		return math.Float64frombits(binary.LittleEndian.Uint64(data)), nil
	}
	return 0, fmt.Errorf("%s: %s %v is no float scalar", path, h.Descr, h.Shape)
}
