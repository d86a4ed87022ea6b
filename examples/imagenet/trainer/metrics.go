package trainer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gorgonia-parallel/gp/nn/checkpoint"
)

// Record is one line of the JSON-lines metrics log.
type Record struct {
	Kind      string  `json:"kind"` // "train" (every print-freq steps) or "val" (every epoch)
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

// Metrics appends records to a JSON-lines file and keeps them for the plot.
type Metrics struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	records []Record
}

// OpenMetrics opens (appending, so a resumed run continues its log) the log at path and
// reads the records already in it.
func OpenMetrics(path string) (*Metrics, error) {
	m := &Metrics{path: path}
	if b, err := os.ReadFile(path); err == nil {
		dec := json.NewDecoder(bytesReader(b))
		for dec.More() {
			var r Record
			if err := dec.Decode(&r); err != nil {
				break // a torn last line from a killed run: keep what parsed
			}
			m.records = append(m.records, r)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trainer: metrics log %s: %w", path, err)
	}
	m.f, m.w = f, bufio.NewWriter(f)
	return m, nil
}

// Add writes one record and flushes it, so the log survives a crash.
func (m *Metrics) Add(r Record) error {
	// Drop records of steps a resumed run repeats, keeping the plot monotonic.
	for len(m.records) > 0 && m.records[len(m.records)-1].Step > r.Step {
		m.records = m.records[:len(m.records)-1]
	}
	m.records = append(m.records, r)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := m.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("trainer: metrics log %s: %w", m.path, err)
	}
	return m.w.Flush()
}

// Close flushes and closes the log.
func (m *Metrics) Close() error {
	if err := m.w.Flush(); err != nil {
		return err
	}
	return m.f.Close()
}

// Plot writes a PNG with three panels: training and validation loss, validation top-1 and
// top-5 accuracy, and the learning rate, against the step.
func (m *Metrics) Plot(path string) error {
	var trainLoss, valLoss, top1, top5, lr plotter.XYs
	for _, r := range m.records {
		x := float64(r.Step)
		switch r.Kind {
		case "train":
			trainLoss = append(trainLoss, plotter.XY{X: x, Y: r.Loss})
			lr = append(lr, plotter.XY{X: x, Y: r.LR})
		case "val":
			valLoss = append(valLoss, plotter.XY{X: x, Y: r.Loss})
			top1 = append(top1, plotter.XY{X: x, Y: r.Top1})
			top5 = append(top5, plotter.XY{X: x, Y: r.Top5})
		}
	}
	panels := []struct {
		title, ylabel string
		log           bool
		series        []series
	}{
		{"loss (log scale)", "cross-entropy", true, []series{{"train", trainLoss, 0}, {"val", valLoss, 1}}},
		{"validation accuracy", "%", false, []series{{"top-1", top1, 2}, {"top-5", top5, 3}}},
		{"learning rate", "lr", false, []series{{"lr", lr, 4}}},
	}
	const w, h = 6 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(w, h*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "step"
		p.Y.Label.Text = pn.ylabel
		p.Add(plotter.NewGrid())
		if pn.log {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		for _, s := range pn.series {
			if len(s.xy) == 0 {
				continue
			}
			xy := s.xy
			if pn.log {
				xy = positive(xy)
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("trainer: plot %s: %w", pn.title, err)
			}
			l.Color = palette[s.color%len(palette)]
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		p.Legend.Top = !pn.log && pn.title != "validation accuracy"
		p.Draw(tiles.At(dc, 0, i))
	}
	err := checkpoint.WriteFile(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("trainer: plot: %w", err)
	}
	return nil
}

// positive drops non-positive points, which a log scale cannot show.
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
