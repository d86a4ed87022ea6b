// Command fuzz runs every fuzz target of the module (each func FuzzXxx in a _test.go file)
// one at a time for -fuzztime on -parallel workers, on the committed corpus
// (testdata/fuzz/FuzzXxx) plus what it finds, and prints a table of the executions and new
// coverage each reached. With -out it writes them as JSON (bench/results/fuzz.json). Any
// target that fails (a crasher; go test writes its input under the package's
// testdata/fuzz/FuzzXxx/) makes the command fail after the others ran. `make test-fuzz` runs
// it for a few seconds a target with -fresh-cache, so each run starts from the committed
// corpus rather than from whatever Go's fuzz cache has gathered on that machine.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

// target is one fuzz function and what a run of it reached.
type target struct {
	Package        string        `json:"package"`
	Name           string        `json:"name"`
	Seconds        float64       `json:"seconds"`           // the -fuzztime it ran for
	Execs          int64         `json:"execs"`             // inputs executed while fuzzing
	ExecsPerSecond float64       `json:"execs_per_second"`  // execs / seconds
	Baseline       int           `json:"baseline_corpus"`   // seed and cached inputs run first
	NewInteresting int           `json:"new_interesting"`   // inputs that reached new coverage
	Crashers       []string      `json:"crashers"`          // failing inputs this run wrote
	Failure        string        `json:"failure,omitempty"` // the first line of the error its run failed with
	Regressions    []*regression `json:"regression_inputs"`
	Wall           float64       `json:"wall_s"` // compile and run
	// Command and Machine are those of the run that measured this target (its machine's
	// load as it started), set where a file holds targets of several runs (-run merges
	// into -out); otherwise the file's own say it.
	Command string             `json:"command,omitempty"`
	Machine *benchutil.Machine `json:"machine,omitempty"`
	// CountRerun is set when the timed run ended with only the fuzzing coordinator's
	// "context deadline exceeded" and no failing input: the run was repeated with
	// -fuzztime <execs>x (a count, no deadline) and this result is that run's.
	CountRerun bool `json:"count_rerun,omitempty"`
}

// regression is an input committed under testdata/fuzz/FuzzXxx/ and what it exposed.
type regression struct {
	File string `json:"file"`
	Fix  string `json:"fix"`
}

// fixes says, for each committed regression input, what it exposed and where it was fixed.
var fixes = map[string]string{
	"FuzzTCPHandshake/stalled-stranger":       "a client that connected to a rank's transport listener and sent nothing held the sequential accept loop for its 30 s deadline, so rank 1 timed out and the world did not form; parallel/comm/tcp.go runs each handshake on its own goroutine",
	"FuzzStoreServer/huge-value-length":       "a store request claiming a 4 GiB value made the server allocate 4 GiB; parallel/comm/store reads with memory growing as bytes arrive and refuses values over 64 MiB",
	"FuzzEnv/negative-node-id":                "SLURM_NODEID=-1 indexed the task counts at -1 (panic in slurmLocalSize); parallel/comm/launchenv refuses negative node and local ids",
	"FuzzFirstHost/space-before-comma":        "FirstHost(\"a ,b\") gave \"a \", and bytes no host name has passed through; FirstHost trims the host and checks its characters",
	"FuzzExpandCounts/over-2e20-nodes":        "SLURM task count lists expanded without a total bound; bounded at 2^20 nodes",
	"FuzzReadArray/npyio-readheader":          "the header that panics npyio v0.14.0's readHeader (slice bounds out of range [:-1], reader.go:101); internal/npyfile parses and checks every header before npyio sees it",
	"FuzzReadArray/2e60-elements":             "a header claiming 2^60 float32s: refused from the header against the bytes present, nothing allocated",
	"FuzzNewReader/npyio-readheader":          "npyio is given only npyfile's canonical copy of a checked header",
	"FuzzRead/crafted-npz":                    "an .npz member with npyio's panicking header panicked checkpoint.Read; members are read through internal/npyfile and the error names file and key",
	"FuzzReadNpy/npyio-readheader":            "modelcheck's .npy inputs reached npyio's panicking readHeader; read through internal/npyfile",
	"FuzzArrayNPY/npyio-readheader":           "data.NewArrayDataset's labels file reached npyio's panicking readHeader; read through internal/npyfile",
	"FuzzArrayNPZ/npyio-readheader-npz":       "npyio/npz.Open parsed every member's header with npyio (panic); the .npz data set reads members through internal/npyfile",
	"FuzzReadTar/npyio-panic-member":          "a WebDataset .npy member with npyio's panicking header, or claiming 2^60 elements, panicked Sample.NPY; now ErrCorrupt naming shard, sample and field",
	"FuzzExpand/maxint-range":                 "a shard pattern {0..9223372036854775807} looped without end (the counter overflowed); Expand refuses more than 2^20 names",
	"FuzzDecode/png-60000x60000":              "a 71-byte grayscale PNG claiming 60000x60000 pixels made image/png allocate 3.6 GB (and the RGB conversion 10.8 GB); data/rgb refuses images over PIL's 178,956,970-pixel limit from the header",
	"FuzzDecode/bmp-0x2147423517":             "found by FuzzDecode in a 5-minute run: a 54-byte BMP of width 0 and height 2,147,423,517 passed the pixel limit (0 pixels) and golang.org/x/image/bmp looped over its empty rows for 20 s; data/rgb refuses images without pixels from the header",
	"FuzzDecode/jpeg-output-over-2e31":        "found by FuzzDecode in a 5-minute run: a 333-byte JPEG whose decoded size passes 2^31 bytes reached the libjpeg-turbo wrapper's make([]byte, int(size)) with the C int wrapped negative (panic: makeslice: len out of range); jpeg_turbo.go refuses it from the header, before any size is computed",
	"FuzzDecode/jpeg-progressive-30000x30000": "a 262-byte progressive JPEG claiming 30000x30000 pixels made libjpeg's jpeg_start_decompress allocate 1.8 GB of coefficients and read every scan (4 s, and more memory than a small worker has at larger sizes) before the wrapper compared the size with the pixel limit; the wrapper now refuses from the header",
	"FuzzDecode/pgm-65536x65536":              "a Netpbm header claiming 65536x65536 samples allocated 32 GiB for them before checking the data was there; data/rgb checks first",
	"FuzzIDX/71d48b0c0c50a324":                "an IDX images file whose header counted 0 images of 131584x62975 pixels opened as an empty dataset whose Shape sized a 33 GB buffer (the fuzz test ran out of memory); data.NewIDXDataset refuses a count of 0, and NewArrayDataset an array without samples",
	"FuzzStatusReply/short-reply":             "decodeStatus indexed a reply without checking its length (RecvMsg fixes the length, so not reachable before); it now checks itself",
	"FuzzReadFile/huge-record":                "a TensorBoard record header claiming 1 GiB was allocated before reading; ReadFile grows with the bytes there are",
	"FuzzMasterOf/port-zero":                  "node 0's registration with a bad port gave the workers MASTER_PORT 0; masterOf refuses ports outside 1-65535",
	"FuzzAdmit/zero-nproc":                    "a registration with --nproc-per-node 0 became a member; admit refuses it",
}

var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)

var progress = regexp.MustCompile(`fuzz: elapsed: \d+s, execs: (\d+) .*new interesting: (\d+) \(total: (\d+)\)`)
var baseline = regexp.MustCompile(`gathering baseline coverage: \d+/(\d+) completed`)
var failing = regexp.MustCompile(`Failing input written to (\S+)`)

func main() {
	fuzztime := flag.Duration("fuzztime", 60*time.Second, "how long each target fuzzes")
	parallel := flag.Int("parallel", 1, "fuzzing workers per target (go test -parallel)")
	match := flag.String("run", "", "only targets whose package/name matches this regular expression")
	fresh := flag.Bool("fresh-cache", false, "fuzz each target from its seeds and committed corpus only, in a temporary cache removed after it, instead of Go's fuzz cache (which keeps every interesting input of earlier runs, so its baseline grows from run to run and can outlast a short -fuzztime)")
	out := flag.String("out", "", "write the results as JSON here (e.g. bench/results/fuzz.json); with -run, the targets run replace theirs in the file and the others stay")
	flag.Parse()
	log.SetFlags(0)
	prov := benchutil.Start("fuzz", os.Args[1:])
	filter := regexp.MustCompile(*match)

	targets, err := discover(".")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%-32s %-22s %8s %10s %8s %8s %6s  %s\n", "package", "target", "seconds", "execs", "execs/s", "baseline", "new", "crashers")
	failed := 0
	var ran []*target
	for _, t := range targets {
		if !filter.MatchString(t.Package + "/" + t.Name) {
			continue
		}
		if *match != "" && *out != "" {
			// Merged into a file of other runs' targets: say which run measured this one.
			m := benchutil.ReadMachine()
			t.Command, t.Machine = prov.Command, &m
		}
		if err := t.run(*fuzztime, *parallel, *fresh); err != nil {
			failed++
			t.Failure = benchutil.FirstLine(err.Error())
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", t.Package, t.Name, err)
		}
		ran = append(ran, t)
		fmt.Printf("%-32s %-22s %8.0f %10d %8.0f %8d %6d  %s\n", t.Package, t.Name, t.Seconds, t.Execs, t.ExecsPerSecond, t.Baseline, t.NewInteresting, strings.Join(t.Crashers, " "))
	}
	if *match != "" && *out != "" {
		ran = mergeInto(*out, ran)
	}
	res := map[string]any{
		"what":            "go test -fuzz of every fuzz target, one at a time, on its seeds and committed corpus plus what it finds (with fresh_cache, not what earlier runs found)",
		"parallel":        *parallel,
		"minimize":        "-fuzzminimizetime 10x",
		"fresh_cache":     *fresh,
		"go":              runtime.Version(),
		"cpus":            runtime.NumCPU(),
		"targets":         ran,
		"targets_failing": countFailing(ran),
		"units": map[string]string{
			"baseline_corpus": "inputs (seeds and cached) run before fuzzing", "new_interesting": "inputs that reached new coverage",
			"execs": "inputs executed while fuzzing", "targets": "with -run, the targets not matched are an earlier run's, kept from -out",
			"targets_failing": "targets in the file that failed or wrote a failing input (crashers), kept ones included",
		},
	}
	prov.End()
	prov.Set(res)
	if *out == "" {
		line, _ := json.Marshal(res)
		fmt.Println(string(line))
	} else if err := prov.Save(os.Stdout, *out, res); err != nil {
		log.Fatal(err)
	}
	if failed > 0 {
		log.Fatalf("%d fuzz targets failed; their inputs are under the packages' testdata/fuzz/ (fix the parser, then commit the input)", failed)
	}
}

// mergeInto returns the targets of the JSON results at path with those of ran in their place.
// A kept target that does not say which run measured it gets the file's command and machine.
func mergeInto(path string, ran []*target) []*target {
	var old struct {
		Command string
		Machine *benchutil.Machine
		Targets []*target
	}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &old)
	}
	for _, t := range old.Targets {
		if t.Command == "" {
			t.Command, t.Machine = old.Command, old.Machine
		}
	}
	byKey := map[string]*target{}
	for _, t := range append(old.Targets, ran...) {
		byKey[t.Package+" "+t.Name] = t
	}
	out := make([]*target, 0, len(byKey))
	for _, t := range byKey {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Package+" "+out[i].Name < out[j].Package+" "+out[j].Name })
	return out
}

// countFailing is how many of ts failed or wrote a failing input: with -run, the kept
// targets of earlier runs count too, as the file holds them.
func countFailing(ts []*target) int {
	n := 0
	for _, t := range ts {
		if t.Failure != "" || len(t.Crashers) > 0 {
			n++
		}
	}
	return n
}

// discover finds every fuzz function under root, by package directory and name.
func discover(root string) ([]*target, error) {
	var out []*target
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin" || n == "build" || n == "runs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllSubmatch(b, -1) {
			t := &target{Package: "./" + filepath.ToSlash(filepath.Dir(p)), Name: string(m[1])}
			t.Regressions = regressions(filepath.Dir(p), t.Name)
			out = append(out, t)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Package != out[j].Package {
			return out[i].Package < out[j].Package
		}
		return out[i].Name < out[j].Name
	})
	return out, err
}

// regressions lists the inputs committed for name in dir's testdata/fuzz.
func regressions(dir, name string) []*regression {
	ents, _ := os.ReadDir(filepath.Join(dir, "testdata", "fuzz", name))
	var out []*regression
	for _, e := range ents {
		key := name + "/" + e.Name()
		out = append(out, &regression{File: filepath.ToSlash(filepath.Join(dir, "testdata", "fuzz", key)), Fix: fixes[key]})
	}
	return out
}

// run fuzzes t for d and parses go test's progress lines.
//
// Go's fuzzing coordinator can report the end of a timed run as a failure: when the
// -fuzztime deadline passes while a worker is between inputs, the deadline's own
// "context deadline exceeded" escapes as the target's error, with no failing input
// written (go.dev/issue/75804, fixed in Go 1.27). Such a run is repeated once with the
// same number of executions given as a count (-fuzztime Nx has no deadline), which
// replays the corpus and fuzzes as much again; that run's result stands, so a real
// crasher still fails.
//
// With fresh, the run uses a temporary fuzz cache of its own (go test's
// -test.fuzzcachedir), so its baseline is the target's seeds and committed corpus and
// what it finds is discarded with the cache; a crasher is still written under the
// package's testdata.
func (t *target) run(d time.Duration, parallel int, fresh bool) error {
	start := time.Now()
	var extra []string
	if fresh {
		dir, err := os.MkdirTemp("", "gp-fuzzcache-")
		if err != nil {
			return fmt.Errorf("fuzz cache for %s: %w", t.Name, err)
		}
		defer os.RemoveAll(dir)
		extra = append(extra, "-test.fuzzcachedir="+dir)
	}
	output, err := t.fuzz(d.String(), parallel, extra...)
	if err != nil && deadlineRace(output, t.Name) && t.Execs > 0 {
		execs := t.Execs
		t.CountRerun = true
		output, err = t.fuzz(strconv.FormatInt(execs, 10)+"x", parallel, extra...)
		t.Execs = max(t.Execs, execs)
	}
	if err != nil && deadlineRace(output, t.Name) && t.Execs == 0 {
		err = fmt.Errorf("%w: the baseline coverage of %d inputs did not finish within -fuzztime %v; give a longer -fuzztime, or -fresh-cache to start from the committed corpus", err, t.Baseline, d)
	}
	t.Wall = time.Since(start).Seconds()
	t.Seconds = d.Seconds()
	t.ExecsPerSecond = float64(t.Execs) / t.Seconds
	if err != nil {
		return fmt.Errorf("%w\n%s", err, lastLines(output, 30))
	}
	return nil
}

// deadlineRace reports whether output is a fuzzing run of name that failed with nothing
// but the coordinator's deadline error: no failing input written, no panic, no other
// failure message.
func deadlineRace(output, name string) bool {
	if failing.MatchString(output) || strings.Contains(output, "panic:") {
		return false
	}
	lines := strings.Split(output, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "--- FAIL: "+name+" ") {
			return i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "context deadline exceeded" &&
				(i+2 >= len(lines) || !strings.HasPrefix(lines[i+2], "    "))
		}
	}
	return false
}

// fuzz runs go test -fuzz for t with the given -fuzztime and records what the output says.
// Extra arguments go to the test binary, after the package.
func (t *target) fuzz(fuzztime string, parallel int, extra ...string) (string, error) {
	args := []string{"test", "-run", "^$", "-fuzz", "^" + t.Name + "$", "-fuzztime", fuzztime,
		"-fuzzminimizetime", "10x", "-parallel", strconv.Itoa(parallel), t.Package}
	cmd := exec.Command("go", append(args, extra...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	output := buf.String()
	sc := bufio.NewScanner(strings.NewReader(output))
	for sc.Scan() {
		line := sc.Text()
		if m := progress.FindStringSubmatch(line); m != nil {
			t.Execs, _ = strconv.ParseInt(m[1], 10, 64)
			t.NewInteresting, _ = strconv.Atoi(m[2])
		}
		if m := baseline.FindStringSubmatch(line); m != nil {
			t.Baseline, _ = strconv.Atoi(m[1])
		}
		if m := failing.FindStringSubmatch(line); m != nil {
			t.Crashers = append(t.Crashers, filepath.ToSlash(filepath.Join(t.Package, m[1])))
		}
	}
	return output, err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
