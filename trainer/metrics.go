package trainer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
	"github.com/gorgonia-parallel/gp/tensorboard"
)

// Record is one line of the JSON-lines metrics log.
type Record struct {
	Kind      string  `json:"kind"` // "train" (every print-freq steps), "val" (every epoch), "val_ema" (-model-ema)
	Epoch     int     `json:"epoch"`
	Step      int64   `json:"step"`
	Loss      float64 `json:"loss"`                // train: mean over the epoch so far; val: mean over the set
	StepLoss  float64 `json:"step_loss,omitempty"` // train: this step's loss, mean over ranks
	LR        float64 `json:"lr,omitempty"`
	Top1      float64 `json:"top1,omitempty"`
	Top5      float64 `json:"top5,omitempty"`
	ImgsPerS  float64 `json:"imgs_per_s,omitempty"`
	ElapsedS  float64 `json:"elapsed_s"`
	LossScale float64 `json:"loss_scale,omitempty"`
}

// MarshalJSON writes r as one JSON object. A value that is not finite (a diverged loss, a
// learning rate of Inf) is written as the string "NaN", "+Inf" or "-Inf", which JSON has no
// number for, and read back as that value by UnmarshalJSON: a log line is never lost to it.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(recordJSON{Kind: r.Kind, Epoch: r.Epoch, Step: r.Step, Loss: jsonFloat(r.Loss),
		StepLoss: jsonFloat(r.StepLoss), LR: jsonFloat(r.LR), Top1: jsonFloat(r.Top1), Top5: jsonFloat(r.Top5),
		ImgsPerS: jsonFloat(r.ImgsPerS), ElapsedS: jsonFloat(r.ElapsedS), LossScale: jsonFloat(r.LossScale)})
}

// UnmarshalJSON reads what MarshalJSON writes (and plain JSON numbers).
func (r *Record) UnmarshalJSON(b []byte) error {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Record{Kind: j.Kind, Epoch: j.Epoch, Step: j.Step, Loss: float64(j.Loss),
		StepLoss: float64(j.StepLoss), LR: float64(j.LR), Top1: float64(j.Top1), Top5: float64(j.Top5),
		ImgsPerS: float64(j.ImgsPerS), ElapsedS: float64(j.ElapsedS), LossScale: float64(j.LossScale)}
	return nil
}

// recordJSON is Record's form in the log.
type recordJSON struct {
	Kind      string    `json:"kind"`
	Epoch     int       `json:"epoch"`
	Step      int64     `json:"step"`
	Loss      jsonFloat `json:"loss"`
	StepLoss  jsonFloat `json:"step_loss,omitempty"`
	LR        jsonFloat `json:"lr,omitempty"`
	Top1      jsonFloat `json:"top1,omitempty"`
	Top5      jsonFloat `json:"top5,omitempty"`
	ImgsPerS  jsonFloat `json:"imgs_per_s,omitempty"`
	ElapsedS  jsonFloat `json:"elapsed_s"`
	LossScale jsonFloat `json:"loss_scale,omitempty"`
}

// jsonFloat is a float64 that JSON carries as a number when finite and as the string "NaN",
// "+Inf" or "-Inf" otherwise.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	switch v := float64(f); {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	default:
		return json.Marshal(v)
	}
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		var v float64
		err := json.Unmarshal(b, &v)
		*f = jsonFloat(v)
		return err
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch s {
	case "NaN":
		*f = jsonFloat(math.NaN())
	case "+Inf", "Inf":
		*f = jsonFloat(math.Inf(1))
	case "-Inf":
		*f = jsonFloat(math.Inf(-1))
	default:
		return fmt.Errorf("trainer: metrics value %q is neither a number nor NaN, +Inf or -Inf", s)
	}
	return nil
}

// Metrics appends records to a JSON-lines file and, once OpenTensorBoard is called, the same
// figures as TensorBoard scalars. It keeps nothing in memory per record: Plot reads the file
// back.
type Metrics struct {
	path string
	f    *os.File
	w    *bufio.Writer
	tb   *tensorboard.Writer
}

// OpenTensorBoard starts a TensorBoard event file in dir (a new one per run, as PyTorch's
// SummaryWriter) that Add writes every record's scalars to: train/loss (the epoch's mean so
// far), train/step_loss, train/lr, train/img_per_s, val/loss, val/top1, val/top5; Scalar
// adds others. It returns the file's path.
func (m *Metrics) OpenTensorBoard(dir string) (string, error) {
	w, err := tensorboard.NewWriter(dir)
	if err != nil {
		return "", fmt.Errorf("trainer: %w", err)
	}
	m.tb = w
	return w.Path(), nil
}

// Scalar writes one scalar to the TensorBoard file (nothing without one).
func (m *Metrics) Scalar(tag string, step int64, v float64) error {
	if m.tb == nil {
		return nil
	}
	if err := m.tb.Scalar(tag, step, v); err != nil {
		return fmt.Errorf("trainer: tensorboard: %w", err)
	}
	return nil
}

// scalars writes r's figures to the TensorBoard file.
func (m *Metrics) scalars(r Record) error {
	type kv struct {
		tag string
		v   float64
		on  bool
	}
	var vs []kv
	switch r.Kind {
	case "train":
		vs = []kv{{"train/loss", r.Loss, true}, {"train/step_loss", r.StepLoss, true}, {"train/lr", r.LR, true},
			{"train/img_per_s", r.ImgsPerS, r.ImgsPerS > 0}, {"train/loss_scale", r.LossScale, r.LossScale > 0}}
	case "val":
		vs = []kv{{"val/loss", r.Loss, true}, {"val/top1", r.Top1, true}, {"val/top5", r.Top5, true}}
	case "val_ema":
		vs = []kv{{"val_ema/loss", r.Loss, true}, {"val_ema/top1", r.Top1, true}, {"val_ema/top5", r.Top5, true}}
	}
	for _, x := range vs {
		if x.on {
			if err := m.Scalar(x.tag, r.Step, x.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// OpenMetrics opens the log at path, appending, for a run that continues after step from:
// 0 for a run from scratch, the checkpoint's step for a resumed one. The records of later
// steps, which an interrupted attempt wrote after the checkpoint that this run resumes from
// (and which this run writes again), are dropped first, with a torn last line, so that the
// log holds each step once; the file is then replaced atomically (checkpoint.WriteFile).
func OpenMetrics(path string, from int64) (*Metrics, error) {
	if err := truncateMetrics(path, from); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trainer: metrics log %s: %w", path, err)
	}
	return &Metrics{path: path, f: f, w: bufio.NewWriter(f)}, nil
}

// truncateMetrics cuts the log at path before its first record of a step after from (or
// its first line that does not parse), rewriting it atomically when anything is cut. The
// records are in step order: every run appends in order, after cutting what it redoes.
func truncateMetrics(path string, from int64) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("trainer: metrics log %s: %w", path, err)
	}
	defer f.Close()
	keep, cut := int64(0), false
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var rec Record
			if line[len(line)-1] != '\n' || json.Unmarshal(line, &rec) != nil || rec.Step > from {
				cut = true // a later step, or a torn last line from a killed run
				break
			}
			keep += int64(len(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("trainer: metrics log %s: %w", path, err)
		}
	}
	if !cut {
		return nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("trainer: metrics log %s: %w", path, err)
	}
	err = checkpoint.WriteFile(path, func(w io.Writer) error {
		_, err := io.CopyN(w, f, keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("trainer: metrics log %s: dropping the records after step %d: %w", path, from, err)
	}
	return nil
}

// Add writes one record and flushes it, so the log survives a crash.
func (m *Metrics) Add(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := m.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("trainer: metrics log %s: %w", m.path, err)
	}
	if err := m.w.Flush(); err != nil {
		return fmt.Errorf("trainer: metrics log %s: %w", m.path, err)
	}
	return m.scalars(r)
}

// Close flushes and closes the log and the TensorBoard file.
func (m *Metrics) Close() error {
	err := m.w.Flush()
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	if m.tb != nil {
		if cerr := m.tb.Close(); err == nil {
			err = cerr
		}
		m.tb = nil
	}
	return err
}

// PlotPoints bounds each curve of the plot: a longer series is averaged over runs of
// consecutive points (see decimated), so plotting reads the log in constant memory.
const PlotPoints = 2048

// Plot writes a PNG with three panels: training and validation loss, validation top-1 and
// top-5 accuracy, and the learning rate, against the step. It reads the log back from its
// file; each curve has at most PlotPoints points. Values a panel cannot show are left out
// (NaN and Inf everywhere; zero and negative losses on the loss panel's log scale), a panel
// with nothing left is drawn empty, and a failure inside gonum/plot comes back as an error
// naming path, never as a panic.
func (m *Metrics) Plot(path string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("trainer: plot %s: gonum/plot failed: %v", path, p)
		}
	}()
	panels, err := m.panels()
	if err != nil {
		return err
	}
	return drawPanels(panels, path)
}

// drawPanels draws panels, one above the other, into the PNG at path; it reads nothing of
// the Metrics they came from, so it may run while the log grows.
func drawPanels(panels []panel, path string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("trainer: plot %s: gonum/plot failed: %v", path, p)
		}
	}()
	const w, h = 6 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1}
	for i, pn := range panels {
		p, err := pn.plot()
		if err != nil {
			return fmt.Errorf("trainer: plot %s: %s: %w", path, pn.title, err)
		}
		p.Draw(tiles.At(dc, 0, i))
	}
	err = checkpoint.WriteFile(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("trainer: plot: %w", err)
	}
	return nil
}

// panel is one panel of the plot.
type panel struct {
	title, ylabel string
	log           bool
	series        []series
}

// panels reads the log back into the plot's three panels.
func (m *Metrics) panels() ([]panel, error) {
	if err := m.w.Flush(); err != nil {
		return nil, fmt.Errorf("trainer: metrics log %s: %w", m.path, err)
	}
	var trainLoss, valLoss, top1, top5, lr decimated
	f, err := os.Open(m.path)
	if err != nil {
		return nil, fmt.Errorf("trainer: plot: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var r Record
		if err := dec.Decode(&r); err != nil {
			break // a line being written: plot what came before
		}
		x := float64(r.Step)
		switch r.Kind {
		case "train":
			trainLoss.add(x, r.Loss)
			lr.add(x, r.LR)
		case "val":
			valLoss.add(x, r.Loss)
			top1.add(x, r.Top1)
			top5.add(x, r.Top5)
		}
	}
	return []panel{
		{"loss (log scale)", "cross-entropy", true, []series{{"train", trainLoss.points(), 0}, {"val", valLoss.points(), 1}}},
		{"validation accuracy", "%", false, []series{{"top-1", top1.points(), 2}, {"top-5", top5.points(), 3}}},
		{"learning rate", "lr", false, []series{{"lr", lr.points(), 4}}},
	}, nil
}

// plot draws the panel's series.
func (pn panel) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.X.Label.Text = "step"
	p.Y.Label.Text = pn.ylabel
	p.Add(plotter.NewGrid())
	var all plotter.XYs
	for _, s := range pn.series {
		xy := s.xy
		if pn.log {
			xy = positive(xy)
		}
		if len(xy) == 0 {
			continue
		}
		all = append(all, xy...)
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.Color = palette[s.color%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		if len(xy) > markedPoints {
			p.Legend.Add(s.name, l)
			continue
		}
		// A series of a few points (validation once per epoch, a short run) is drawn with
		// markers: a line of one point is invisible.
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: l.Color, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
		p.Add(sc)
		p.Legend.Add(s.name, l, sc)
	}
	if pn.log && len(all) > 0 {
		// A log axis without a positive value has no range to draw: an empty panel keeps
		// the linear one.
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	fitAxes(p, all, pn.log)
	p.Legend.Top = !pn.log && pn.title != "validation accuracy"
	return p, nil
}

// markedPoints is the longest series the plot draws with a marker at each point.
const markedPoints = 50

// fitAxes sets the ranges of p's axes so that a few points get readable ticks: a range of
// zero width (one point, or a constant series) is widened around its value; a log axis
// spans at least one decade, from and to powers of ten, so that it has labelled ticks.
func fitAxes(p *plot.Plot, xy plotter.XYs, log bool) {
	if len(xy) == 0 {
		return
	}
	xmin, xmax, ymin, ymax := xy[0].X, xy[0].X, xy[0].Y, xy[0].Y
	for _, q := range xy {
		xmin, xmax = min(xmin, q.X), max(xmax, q.X)
		ymin, ymax = min(ymin, q.Y), max(ymax, q.Y)
	}
	if xmin == xmax {
		xmin, xmax = max(0, xmin-1), xmax+1
	}
	p.X.Min, p.X.Max = xmin, xmax
	switch {
	case log:
		lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if hi <= lo {
			hi = lo + 1
		}
		p.Y.Min, p.Y.Max = math.Pow(10, lo), math.Pow(10, hi)
	case ymin == ymax:
		d := math.Abs(ymin) / 2
		if d == 0 {
			d = 1
		}
		p.Y.Min, p.Y.Max = ymin-d, ymax+d
		if ymin >= 0 {
			p.Y.Min = max(0, p.Y.Min)
		}
	default:
		p.Y.Min, p.Y.Max = ymin, ymax
	}
}

// decimated is a series of at most PlotPoints points fed one at a time: each point is the
// mean of a run of group consecutive inputs; when the series fills up, neighbouring points
// are averaged in pairs and group doubles. The last run may be partial.
type decimated struct {
	xy         plotter.XYs
	group      int
	sumX, sumY float64
	n          int
}

func (d *decimated) add(x, y float64) {
	if math.IsNaN(y) || math.IsInf(y, 0) {
		return // not drawable; it would also poison the mean of its run
	}
	if d.group == 0 {
		d.group = 1
	}
	d.sumX, d.sumY, d.n = d.sumX+x, d.sumY+y, d.n+1
	if d.n < d.group {
		return
	}
	d.xy = append(d.xy, plotter.XY{X: d.sumX / float64(d.n), Y: d.sumY / float64(d.n)})
	d.sumX, d.sumY, d.n = 0, 0, 0
	if len(d.xy) == PlotPoints {
		for i := 0; i < PlotPoints/2; i++ {
			a, b := d.xy[2*i], d.xy[2*i+1]
			d.xy[i] = plotter.XY{X: (a.X + b.X) / 2, Y: (a.Y + b.Y) / 2}
		}
		d.xy = d.xy[:PlotPoints/2]
		d.group *= 2
	}
}

// points is the series, with the partial last run's mean.
func (d *decimated) points() plotter.XYs {
	if d.n == 0 {
		return d.xy
	}
	return append(d.xy[:len(d.xy):len(d.xy)], plotter.XY{X: d.sumX / float64(d.n), Y: d.sumY / float64(d.n)})
}

// positive drops non-positive points, which a log scale cannot show (add has dropped the
// non-finite ones).
func positive(xy plotter.XYs) plotter.XYs {
	var out plotter.XYs
	for _, p := range xy {
		if p.Y > 0 {
			out = append(out, p)
		}
	}
	return out
}

type series struct {
	name  string
	xy    plotter.XYs
	color int
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
}
