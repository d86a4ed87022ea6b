// Command data benchmarks the input pipeline: decode + RandomResizedCrop(224) + flip + normalize
// images/s on 500x375 JPEGs with 1 and 2 workers, next to torchvision's ImageFolder + DataLoader
// (PIL) in the same run. It prints a table and writes bench/results/data.json.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gorgonia-parallel/gp/data"
	"github.com/gorgonia-parallel/gp/data/rgb"
	"github.com/gorgonia-parallel/gp/data/transforms"
	"github.com/gorgonia-parallel/gp/internal/benchutil"
)

type row struct {
	Workers    int     `json:"workers"`
	ImgsPerS   float64 `json:"imgs_per_s"`
	TorchVis   any     `json:"torchvision_imgs_per_s"` // a rate, or why there is none
	Ratio      any     `json:"ratio"`
	Images     int     `json:"images"`
	Decoder    string  `json:"decoder"`
	Resolution string  `json:"resolution"`
}

func main() {
	cache := flag.String("cache", filepath.Join("bench", "data", ".cache", "jpeg500x375"), "folder of generated JPEGs (reused)")
	n := flag.Int("n", 480, "images in the set")
	batch := flag.Int("batch", 32, "batch size")
	out := flag.String("out", filepath.Join("bench", "results", "data.json"), "JSON results")
	py := flag.String("python", "/usr/bin/python3", "Python with torch and torchvision")
	flag.Parse()
	prov := benchutil.Start("data", os.Args[1:])
	if err := generate(*cache, *n); err != nil {
		log.Fatal(err)
	}
	decoder := "image/jpeg (pure Go)"
	if rgb.HaveTurbo {
		decoder = "libjpeg-turbo (cgo)"
	}
	var rows []row
	for _, w := range []int{1, 2} {
		ours, imgs, err := runOurs(*cache, w, *batch)
		if err != nil {
			log.Fatal(err)
		}
		r := row{Workers: w, ImgsPerS: round(ours), Images: imgs, Decoder: decoder, Resolution: "500x375 -> 224x224"}
		tv, err := runTorch(*py, *cache, w, *batch)
		if err != nil {
			r.TorchVis, r.Ratio = "unavailable: "+err.Error(), "n/a"
		} else {
			r.TorchVis, r.Ratio = round(tv), round(ours/tv)
		}
		rows = append(rows, r)
	}
	fmt.Printf("decode + RandomResizedCrop(224) + flip + normalize, %d JPEGs 500x375, batch %d, decoder %s\n", *n, *batch, decoder)
	fmt.Printf("%-8s %-16s %-28s %s\n", "workers", "ours (img/s)", "torchvision+PIL (img/s)", "ratio (ours/torchvision)")
	for _, r := range rows {
		fmt.Printf("%-8d %-16.1f %-28v %v\n", r.Workers, r.ImgsPerS, r.TorchVis, r.Ratio)
	}
	prov.End()
	if err := prov.Save(os.Stdout, *out, benchutil.Rows[row]{Provenance: prov, Units: map[string]string{
		"ratio":      "ours over torchvision's images per second",
		"images":     "images decoded and transformed per measurement",
		"resolution": "pixels, source -> output",
	}, Rows: rows}); err != nil {
		log.Fatal(err)
	}
}

func round(x float64) float64 { return math.Round(x*100) / 100 }

// runOurs times one epoch after a warm-up epoch.
func runOurs(root string, workers, batch int) (float64, int, error) {
	ds, err := data.NewImageFolder(root, data.WithTransform(transforms.Train(224)))
	if err != nil {
		return 0, 0, err
	}
	l, err := data.NewLoader(ds, data.WithBatchSize(batch), data.WithWorkers(workers), data.WithShuffle(true), data.WithSeed(1))
	if err != nil {
		return 0, 0, err
	}
	for e := 0; e < 2; e++ {
		l.SetEpoch(e)
		for _, err := range l.Batches(context.Background()) {
			if err != nil {
				return 0, 0, err
			}
		}
		if e == 0 {
			l, _ = data.NewLoader(ds, data.WithBatchSize(batch), data.WithWorkers(workers), data.WithShuffle(true), data.WithSeed(1))
		}
	}
	st := l.Stats()
	return st.ImagesPerSec(), int(st.Images), nil
}

func runTorch(py, root string, workers, batch int) (float64, error) {
	script := filepath.Join("bench", "data", "torchvision_bench.py")
	if _, err := os.Stat(py); err != nil {
		return 0, fmt.Errorf("%s not found", py)
	}
	cmd := exec.Command(py, script, root, fmt.Sprint(workers), fmt.Sprint(batch), "224")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		return 0, fmt.Errorf("torchvision run failed: %s", msg)
	}
	var r struct {
		ImgsPerS float64 `json:"imgs_per_s"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(outb), &r); err != nil {
		return 0, fmt.Errorf("torchvision output %q: %v", outb, err)
	}
	return r.ImgsPerS, nil
}

// generate writes n ImageNet-like 500x375 JPEGs (quality 90, 4:2:0) into 8 class folders, once.
func generate(root string, n int) error {
	marker := filepath.Join(root, fmt.Sprintf(".complete-%d", n))
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	var img rgb.Image
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		dir := filepath.Join(root, fmt.Sprintf("class_%d", i%8))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		photo(&img, 500, 375, rand.New(rand.NewPCG(uint64(i), 99)))
		buf.Reset()
		if err := rgb.EncodeJPEG(&buf, &img, 90); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d.jpg", i)), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(marker, nil, 0o644)
}

// photo draws smooth gradients, overlapping ellipses, texture and sensor-like noise, so the
// JPEGs have ImageNet-like sizes (~60-120 kB at quality 90).
func photo(img *rgb.Image, w, h int, r *rand.Rand) {
	img.Resize(w, h)
	type blob struct{ x, y, rx, ry, c0, c1, c2, f float64 }
	bl := make([]blob, 6+r.IntN(8))
	for i := range bl {
		bl[i] = blob{r.Float64() * float64(w), r.Float64() * float64(h), 20 + r.Float64()*150, 20 + r.Float64()*150,
			r.Float64() * 255, r.Float64() * 255, r.Float64() * 255, 0.05 + r.Float64()*0.3}
	}
	g0, g1 := r.Float64()*255, r.Float64()*255
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			t := float64(x+y) / float64(w+h)
			c := [3]float64{g0*(1-t) + g1*t, g1*(1-t) + g0*t, (g0 + g1) / 2}
			for _, b := range bl {
				dx, dy := (float64(x)-b.x)/b.rx, (float64(y)-b.y)/b.ry
				if dx*dx+dy*dy < 1 {
					tex := 30 * math.Sin(float64(x)*b.f) * math.Cos(float64(y)*b.f)
					c = [3]float64{b.c0 + tex, b.c1 + tex, b.c2 - tex}
				}
			}
			o := (y*w + x) * 3
			for k := 0; k < 3; k++ {
				img.Pix[o+k] = uint8(max(0, min(255, c[k]+18*(r.Float64()-0.5))))
			}
		}
	}
}
