//go:build linux

// Command chaos is the fail-fast soak (not part of make test): for N
// minutes it runs a small DDP job again and again (gprun, 2 ranks, resnet18 on 16x16
// WebDataset shards, --max-restarts generous, a checkpoint every few steps, -out on a tmpfs
// it mounts) while a driver injects one fault into each: SIGKILL of a random rank, the disk
// filled (a junk file over the tmpfs's free space, freed after a moment), a training shard
// corrupted in place (truncated or overwritten with random bytes, restored after a moment),
// or that corruption with the other rank SIGKILLed during it (so that the restarted workers,
// which scan every shard, meet the damage). Each job must end either with exactly the parameters of a clean run of the same
// job (every entry of the final checkpoint, bit for bit) or with a clear error (gprun's one
// report, naming a rank and a reason); and leave no process, no /dev/shm file of this
// project's ("gp-comm-") and no half-written checkpoint (a checkpoint.WriteFile temporary,
// ".NAME.tmp-*", or a checkpoint that does not load). It prints a table of faults and
// outcomes and writes bench/results/chaos.json. It needs root for the tmpfs.
//
//	go run ./bench/chaos [-minutes 3] [-steps 30] [-ckpt-every 4] [-max-restarts 8] [-seed N]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

type config struct {
	Minutes     float64 `json:"minutes"`
	Steps       int     `json:"steps"`
	CkptEvery   int     `json:"ckpt_every"`
	MaxRestarts int     `json:"max_restarts"`
	Seed        uint64  `json:"seed"`
	TmpfsMiB    int     `json:"tmpfs_mib"`
}

// episode is one job and the fault injected into it.
type episode struct {
	N     int     `json:"n"`
	Fault string  `json:"fault"` // kill, disk-full, corrupt-shard, corrupt-and-kill
	Where string  `json:"where"` // the rank killed, the bytes filled, the shard and how
	At    float64 `json:"at_s"`  // seconds after the job's start
	// Missed is set when the job had already ended when the fault came.
	Missed bool    `json:"missed,omitempty"`
	Hold   float64 `json:"hold_s"` // how long the disk stayed full or the shard corrupt
	// Outcome is identical, clear-error, MISMATCH, unclear-error or HANG.
	Outcome  string  `json:"outcome"`
	Detail   string  `json:"detail,omitempty"` // the report, or the first differing entry
	Restarts int     `json:"restarts"`         // restarts gprun made
	Seconds  float64 `json:"seconds"`
	ExitCode int     `json:"exit_code"`
	// What the job left behind (each must be empty).
	LeftProcs []int    `json:"left_processes,omitempty"`
	LeftSHM   []string `json:"left_shm,omitempty"`
	LeftTemps []string `json:"left_temp_files,omitempty"`
	BadCkpts  []string `json:"bad_checkpoints,omitempty"`
}

func (e *episode) ok() bool {
	return (e.Outcome == "identical" || e.Outcome == "clear-error") &&
		len(e.LeftProcs)+len(e.LeftSHM)+len(e.LeftTemps)+len(e.BadCkpts) == 0
}

type results struct {
	benchutil.Provenance
	Units      map[string]string `json:"units"`
	Config     config            `json:"config"`
	CleanRunS  float64           `json:"clean_run_s"`
	CleanAgree bool              `json:"clean_runs_bitwise_equal"` // two clean runs, compared as the episodes are
	Episodes   []*episode        `json:"episodes"`
	Summary    []row             `json:"summary"`
	AllOK      bool              `json:"all_ok"`
}

// row is one line of the table: a fault kind and its outcomes.
type row struct {
	Fault       string `json:"fault"`
	Injected    int    `json:"injected"`
	Missed      int    `json:"missed"`    // the job had ended before the fault came
	Restarted   int    `json:"restarted"` // jobs the fault made gprun restart at least once
	Identical   int    `json:"identical"`
	ClearError  int    `json:"clear_error"`
	Bad         int    `json:"bad"` // MISMATCH, unclear error or hang
	LeftBehind  int    `json:"left_behind"`
	MaxRestarts int    `json:"max_restarts_one_job"`
}

func main() {
	var cfg config
	flag.Float64Var(&cfg.Minutes, "minutes", 3, "how long to inject faults (the job running then finishes)")
	flag.IntVar(&cfg.Steps, "steps", 30, "training steps of each job (12 per epoch)")
	flag.IntVar(&cfg.CkptEvery, "ckpt-every", 4, "checkpoint every N steps")
	flag.IntVar(&cfg.MaxRestarts, "max-restarts", 8, "gprun --max-restarts")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the faults' kinds, times and targets")
	flag.IntVar(&cfg.TmpfsMiB, "tmpfs-mib", 512, "size of the tmpfs holding -out")
	jsonPath := flag.String("json", "bench/results/chaos.json", "where to write the results")
	flag.Parse()
	if err := run(cfg, *jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(cfg config, jsonPath string) error {
	work, err := os.MkdirTemp("", "gp-chaos-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Printf("chaos: seed %d (-seed %d replays the faults' choices; timing still varies)\n", cfg.Seed, cfg.Seed)
	bins, err := build(work)
	if err != nil {
		return err
	}
	dataDir := filepath.Join(work, "data")
	if err := writeShards(dataDir); err != nil {
		return err
	}
	mnt := filepath.Join(work, "tmpfs")
	unmount, err := mountTmpfs(mnt, cfg.TmpfsMiB)
	if err != nil {
		return err
	}
	defer unmount()

	// Two clean runs: the reference, and a check that the comparison is meaningful (a clean
	// run repeats itself bit for bit).
	res := &results{Provenance: provenance(cfg), Config: cfg, Units: map[string]string{
		"summary": "jobs (each counted once per column that applies)", "clean_run_s": "seconds", "episodes.seconds": "seconds of the job under the fault"}}
	cleanDirs := []string{filepath.Join(work, "clean0"), filepath.Join(work, "clean1")}
	for _, d := range cleanDirs {
		j := startJob(bins, dataDir, d, cfg)
		if !j.wait(5 * time.Minute) {
			j.kill()
			return fmt.Errorf("the clean run did not finish in 5 min:\n%s", j.output())
		}
		if j.exitCode != 0 {
			return fmt.Errorf("the clean run failed (exit %d):\n%s", j.exitCode, j.output())
		}
		res.CleanRunS = j.took.Seconds()
	}
	diff, err := compareFinal(cleanDirs[0], cleanDirs[1], cfg.Steps)
	if err != nil {
		return err
	}
	res.CleanAgree = diff == ""
	fmt.Printf("chaos: clean run %.1fs, %d steps; a second clean run is bitwise equal: %v %s\n", res.CleanRunS, cfg.Steps, res.CleanAgree, diff)

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	kinds := []string{"kill", "disk-full", "corrupt-shard", "corrupt-and-kill"}
	deadline := time.Now().Add(time.Duration(cfg.Minutes * float64(time.Minute)))
	for n := 0; time.Now().Before(deadline); n++ {
		ep := &episode{N: n, Fault: kinds[n%len(kinds)]}
		if n%len(kinds) == 0 {
			rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			ep.Fault = kinds[0]
		}
		runEpisode(ep, rng, bins, dataDir, filepath.Join(mnt, fmt.Sprintf("ep%03d", n)), cleanDirs[0], res.CleanRunS, cfg)
		res.Episodes = append(res.Episodes, ep)
		mark := ""
		if ep.Missed {
			mark = "  (missed: the job had ended)"
		}
		if !ep.ok() {
			mark = "  <-- not OK"
		}
		fmt.Printf("  #%-3d %-16s %-40s at %4.1fs hold %3.1fs: %-13s restarts %d, %5.1fs%s\n", n, ep.Fault, ep.Where, ep.At, ep.Hold,
			ep.Outcome, ep.Restarts, ep.Seconds, mark)
		if !ep.ok() {
			fmt.Printf("        %s %v %v %v %v\n", ep.Detail, ep.LeftProcs, ep.LeftSHM, ep.LeftTemps, ep.BadCkpts)
		}
	}
	res.Summary, res.AllOK = summarize(res.Episodes)
	res.AllOK = res.AllOK && res.CleanAgree
	printTable(res)
	res.End()
	if err := res.Provenance.Save(os.Stdout, jsonPath, res); err != nil {
		return err
	}
	line, _ := json.Marshal(struct {
		Summary []row `json:"summary"`
		AllOK   bool  `json:"all_ok"`
	}{res.Summary, res.AllOK})
	fmt.Println(string(line))
	if !res.AllOK {
		return fmt.Errorf("some outcomes were neither the clean run's parameters nor a clear error, or left something behind")
	}
	return nil
}

// provenance is the run's command and machine; the command has -seed even when the user
// left it to the clock, so that it replays the same faults.
func provenance(cfg config) benchutil.Provenance {
	seeded := false
	flag.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	return benchutil.Start("chaos", withSeed(os.Args[1:], seeded, cfg.Seed))
}

// withSeed is args with "-seed seed" added unless the user set it (seeded); args is not
// modified.
func withSeed(args []string, seeded bool, seed uint64) []string {
	if seeded {
		return args
	}
	return append(slices.Clone(args), "-seed", strconv.FormatUint(seed, 10))
}

// runEpisode runs one job under ep's fault and classifies how it ended.
func runEpisode(ep *episode, rng *rand.Rand, bins binaries, dataDir, out, cleanDir string, cleanS float64, cfg config) {
	shmBefore := shmFiles()
	j := startJob(bins, dataDir, out, cfg)
	// The job's process ids, polled while it runs: a /dev/shm file left behind counts
	// against the job only when its name's creator pid (gp-comm-<pid>-...) was one of them,
	// since other programs on the machine may be using shared memory at the same time.
	pids := map[int]bool{}
	var pidsMu sync.Mutex
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			ps := jobProcesses(j.id)
			pidsMu.Lock()
			for _, p := range ps {
				pids[p] = true
			}
			pidsMu.Unlock()
			select {
			case <-j.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// The fault lands between 10% and 70% of a clean run's time, so in the middle of
	// training (start-up takes the first second or so).
	ep.At = cleanS * (0.1 + 0.6*rng.Float64())
	hold := time.Duration((0.5 + 2.5*rng.Float64()) * float64(time.Second))
	rank := rng.IntN(2)
	truncate := rng.IntN(2) == 0
	select {
	case <-j.done:
	case <-time.After(time.Until(j.start.Add(time.Duration(ep.At * float64(time.Second))))):
	}
	select {
	case <-j.done:
		ep.Missed = true
	default:
	}
	switch ep.Fault {
	case "kill":
		ep.Where = fmt.Sprintf("rank %d", rank)
		if pid := j.workerPID(rank); pid > 0 {
			killPID(pid)
		} else {
			ep.Where += " (not running)"
		}
	case "disk-full":
		n, restore, err := fillDisk(filepath.Dir(out))
		ep.Where = fmt.Sprintf("%.0f MiB junk", float64(n)/(1<<20))
		if err != nil {
			ep.Where = "fill failed: " + err.Error()
		}
		ep.Hold = hold.Seconds()
		time.Sleep(hold)
		restore()
	case "corrupt-shard", "corrupt-and-kill":
		shard := filepath.Join(dataDir, fmt.Sprintf("train-%06d.tar", rank))
		how := "random bytes"
		if truncate {
			how = "truncated"
		}
		ep.Where = fmt.Sprintf("%s %s", filepath.Base(shard), how)
		restore, err := corruptShard(shard, truncate, rng)
		if err != nil {
			ep.Where += " failed: " + err.Error()
		}
		ep.Hold = hold.Seconds()
		if ep.Fault == "corrupt-and-kill" {
			// The loader reads a shard only as an epoch begins; a restart reads (scans) every
			// shard at once. Kill the other rank, so that the restarted job meets the damage.
			ep.Where += fmt.Sprintf(", rank %d killed", 1-rank)
			if pid := j.workerPID(1 - rank); pid > 0 {
				killPID(pid)
			} else {
				ep.Where += " (not running)"
			}
		}
		time.Sleep(hold)
		if err := restore(); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: restoring %s: %v (stopping)\n", shard, err)
			j.kill()
			os.Exit(1)
		}
	}
	if !j.wait(4 * time.Minute) {
		j.kill()
		ep.Outcome, ep.Detail = "HANG", "gprun still running 4 min later"
	}
	ep.Seconds, ep.ExitCode = j.took.Seconds(), j.exitCode
	ep.Restarts = strings.Count(j.output(), "gprun: restarting the workers")
	if ep.Outcome == "" {
		classify(ep, j, out, cleanDir, cfg.Steps)
	}
	// Leftovers: processes (gprun waited for its workers, so none may run now), this
	// project's shared-memory files, checkpoint temporaries, checkpoints that do not load.
	ep.LeftProcs = jobProcesses(j.id)
	for _, pid := range ep.LeftProcs {
		killPID(pid)
	}
	<-polled
	for f := range shmFiles() {
		var pid int
		fmt.Sscanf(f, "gp-comm-%d-", &pid)
		if !shmBefore[f] && pids[pid] {
			ep.LeftSHM = append(ep.LeftSHM, f)
		}
	}
	ep.LeftTemps, ep.BadCkpts = checkOut(out)
	os.RemoveAll(out)
}

// classify sets ep's outcome from how the job ended.
func classify(ep *episode, j *job, out, cleanDir string, steps int) {
	if j.exitCode == 0 {
		diff, err := compareFinal(cleanDir, out, steps)
		switch {
		case err != nil:
			ep.Outcome, ep.Detail = "MISMATCH", err.Error()
		case diff != "":
			ep.Outcome, ep.Detail = "MISMATCH", diff
		default:
			ep.Outcome = "identical"
		}
		return
	}
	// A clear error: gprun's one report of the last attempt, naming a rank and a reason (its
	// recorded reason, or its stderr's last lines).
	var reports []string
	for _, l := range strings.Split(j.output(), "\n") {
		if strings.HasPrefix(l, "gprun: rank ") {
			reports = append(reports, l)
		}
	}
	last := ""
	if len(reports) > 0 {
		last = reports[len(reports)-1]
	}
	ep.Detail = last
	if i := strings.Index(last, "restarts)"); i >= 0 && len(strings.TrimSpace(last[i+len("restarts)"):])) > 2 {
		ep.Outcome = "clear-error"
	} else {
		ep.Outcome = "unclear-error"
		ep.Detail = lastLines(j.output(), 6)
	}
}

func summarize(eps []*episode) ([]row, bool) {
	by := map[string]*row{}
	allOK := len(eps) > 0
	for _, e := range eps {
		r := by[e.Fault]
		if r == nil {
			r = &row{Fault: e.Fault}
			by[e.Fault] = r
		}
		r.Injected++
		if e.Missed {
			r.Missed++
		}
		if e.Restarts > 0 {
			r.Restarted++
		}
		r.MaxRestarts = max(r.MaxRestarts, e.Restarts)
		switch e.Outcome {
		case "identical":
			r.Identical++
		case "clear-error":
			r.ClearError++
		default:
			r.Bad++
		}
		if len(e.LeftProcs)+len(e.LeftSHM)+len(e.LeftTemps)+len(e.BadCkpts) > 0 {
			r.LeftBehind++
		}
		allOK = allOK && e.ok()
	}
	var rows []row
	for _, r := range by {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Fault < rows[j].Fault })
	return rows, allOK
}

func printTable(res *results) {
	fmt.Printf("\nchaos: %d jobs in %.1f min (each %d steps, clean run %.1fs), outcomes against the clean run's final checkpoint (bitwise):\n",
		len(res.Episodes), res.Config.Minutes, res.Config.Steps, res.CleanRunS)
	fmt.Printf("%-17s %9s %7s %10s %10s %12s %5s %12s %13s\n", "fault", "injected", "missed", "restarted", "identical", "clear error", "bad", "left behind", "max restarts")
	var tot row
	for _, r := range res.Summary {
		fmt.Printf("%-17s %9d %7d %10d %10d %12d %5d %12d %13d\n", r.Fault, r.Injected, r.Missed, r.Restarted, r.Identical, r.ClearError, r.Bad, r.LeftBehind, r.MaxRestarts)
		tot.Injected += r.Injected
		tot.Missed += r.Missed
		tot.Restarted += r.Restarted
		tot.Identical += r.Identical
		tot.ClearError += r.ClearError
		tot.Bad += r.Bad
		tot.LeftBehind += r.LeftBehind
		tot.MaxRestarts = max(tot.MaxRestarts, r.MaxRestarts)
	}
	fmt.Printf("%-17s %9d %7d %10d %10d %12d %5d %12d %13d\n", "all", tot.Injected, tot.Missed, tot.Restarted, tot.Identical, tot.ClearError, tot.Bad, tot.LeftBehind, tot.MaxRestarts)
	fmt.Println("(missed: the job had ended before the fault came; restarted: jobs the fault made gprun restart; bad: a final state unlike the clean run's, an error without a cause, or a hang;")
	fmt.Println(" left behind: processes, /dev/shm/gp-comm-* files, checkpoint temporaries or unloadable checkpoints after the job)")
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// binaries are gprun and the trainer, built for this run.
type binaries struct{ gprun, imagenet string }

func build(dir string) (binaries, error) {
	b := binaries{filepath.Join(dir, "gprun"), filepath.Join(dir, "imagenet")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, p := range [][2]string{{b.gprun, "./cmd/gprun"}, {b.imagenet, "./examples/imagenet"}} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", p[0], p[1]).CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s (run from the repository root): %v\n%s", p[1], err, out)
		}
	}
	return b, nil
}
