package trainer

import (
	"context"
	"fmt"
	"github.com/gorgonia-parallel/gp/internal/procstatus"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/parallel/comm"
	"github.com/gorgonia-parallel/gp/parallel/timeline"
)

// finishReport writes the per-rank timelines and prints the end-of-run summary on rank 0:
// throughput, communication overlap and peak memory per rank.
func finishReport(ctx context.Context, g comm.Group, cfg *settings, res *Result, out io.Writer) error {
	rank, world := g.Rank(), g.Size()
	rss := make([]float64, world)
	mine := []float64{float64(peakRSS())}
	if err := g.AllGather(comm.F64(rss), comm.F64(mine)).Wait(ctx); err != nil {
		return fmt.Errorf("trainer: gathering memory use: %w", err)
	}
	res.RSSBytes = rss
	if rank != 0 {
		return nil
	}
	writeSummary(out, world, res)
	return nil
}

// writeSummary prints the end-of-run summary: only what this run did and wrote (no
// accuracy without a validation, no path of a file that was not written).
func writeSummary(out io.Writer, world int, res *Result) {
	fmt.Fprintf(out, "\nsummary: %d steps, %.1f images/s over %d ranks", res.Steps, res.ImgsPerS, world)
	ran := res.Steps > res.StartStep // this run took steps (not only resumed or evaluated)
	if ran {
		fmt.Fprintf(out, ", final train loss %.4f", res.FinalLoss)
	}
	switch {
	case res.Evaluated:
		fmt.Fprintf(out, ", val top-1 %.2f%% top-5 %.2f%%", res.Top1, res.Top5)
	case ran:
		fmt.Fprint(out, ", no validation (the run stopped before an epoch's end)")
	default:
		fmt.Fprintf(out, ", no step taken: the run was at step %d, where -epochs or -max-steps ends it", res.Steps)
	}
	fmt.Fprintln(out)
	if res.Evaluated && (res.EMATop1 > 0 || res.EMATop5 > 0) {
		fmt.Fprintf(out, "         weight average (EMA): val top-1 %.2f%% top-5 %.2f%%\n", res.EMATop1, res.EMATop5)
	}
	if res.ModelStateBytes == 0 && ran { // replicated: DDP's overlap; ZeRO-3 reports its state instead
		fmt.Fprintf(out, "         all-reduce hidden behind backward: %.0f%%\n", 100*res.OverlapFrac)
	}
	if res.ModelStateBytes > 0 {
		fmt.Fprintf(out, "         ZeRO-3 model state held per rank: %.1f MiB\n", float64(res.ModelStateBytes)/(1<<20))
	}
	if len(res.RSSBytes) > 0 {
		fmt.Fprintf(out, "         peak memory per rank:")
		for r, b := range res.RSSBytes {
			fmt.Fprintf(out, " rank%d %.0f MiB", r, b/(1<<20))
		}
		fmt.Fprintln(out)
	}
	for _, f := range []struct{ name, path string }{
		{"checkpoint ", res.Checkpoint}, {"metrics    ", res.MetricsPath}, {"tensorboard", res.TensorBoardPath}, {"plot       ", res.PlotPath},
	} {
		if f.path != "" {
			fmt.Fprintf(out, "         %s %s\n", f.name, f.path)
		}
	}
	if res.TimelinePaths != nil {
		fmt.Fprintf(out, "         timelines   %s\n", strings.Join(res.TimelinePaths, ", "))
	}
}

// timelineSteps is the number of steps each rank's timeline keeps, from cfg.TimelineSteps:
// for ddp.TimelineSteps and timeline.New.
func timelineSteps(cfg *settings) int {
	switch n := cfg.TimelineSteps; {
	case n == 0:
		return timeline.DefaultSteps
	case n < 0:
		return 0
	default:
		return n
	}
}

// timelineName is the base name of rank's timeline under the run directory, and
// mergedTimelineName that of rank 0's merge of them.
func timelineName(rank int) string { return fmt.Sprintf("timeline-rank%d.json", rank) }

const mergedTimelineName = "timeline.json"

// writeTimelines writes this rank's timeline as OUT/timeline-rankN.json (Chrome trace) and,
// once every rank has, rank 0 merges them into OUT/timeline.json. The timeline holds only
// the events of the last cfg.TimelineSteps steps (the trace's metadata says which); with
// timelines off (a negative cfg.TimelineSteps) nothing is written.
func writeTimelines(ctx context.Context, g comm.Group, cfg *settings, tl *timeline.Timeline, res *Result) error {
	if tl.Steps() == 0 {
		return nil
	}
	rank, world := g.Rank(), g.Size()
	path := func(r int) string { return filepath.Join(cfg.Out, timelineName(r)) }
	if err := writeFileAtomic(path(rank), tl.WriteChromeTrace); err != nil {
		return err
	}
	for r := range world {
		res.TimelinePaths = append(res.TimelinePaths, path(r))
	}
	if err := g.Barrier().Wait(ctx); err != nil {
		return fmt.Errorf("trainer: waiting for every rank's timeline: %w", err)
	}
	if rank != 0 {
		return nil
	}
	var files []io.Reader
	for r := range world {
		f, err := os.Open(path(r))
		if err != nil {
			return fmt.Errorf("trainer: merging timelines: %w", err)
		}
		defer f.Close()
		files = append(files, f)
	}
	merged := filepath.Join(cfg.Out, mergedTimelineName)
	if err := writeFileAtomic(merged, func(w io.Writer) error { return timeline.MergeChromeTraces(w, files...) }); err != nil {
		return err
	}
	res.TimelinePaths = append(res.TimelinePaths, merged)
	return nil
}

// peakRSS is the process's peak resident set (VmHWM), in bytes; 0 where /proc is absent.
func peakRSS() int64 {
	b, err := procstatus.Bytes("VmHWM")
	if err != nil {
		return 0
	}
	return b
}

// writeFileAtomic creates path's directory and writes path with checkpoint.WriteFile.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	if err := checkpoint.WriteFile(path, write); err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	return nil
}
